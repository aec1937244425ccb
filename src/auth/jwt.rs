//! JSON Web Tokens through the `jsonwebtoken` crate: keys from
//! `[[auth.jwt.keys]]` and a JWKS file (re-read on SIGHUP), each bound to
//! one algorithm, so a token cannot pick how it is checked (`alg: none`
//! does not parse, and an RS256 public key is never tried as an HS256
//! secret). `exp` and `sub` are required; `nbf`, `iss` and `aud` are
//! checked, with `leeway_s` of clock skew.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use parking_lot::RwLock;

use super::Grants;
use crate::config::ConfigError;
use crate::config::auth::{JwtConfig, Permissions};

/// One verification key.
struct Key {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
    /// A JWKS key's SHA-256 fingerprint (of its JWK as read), so that a
    /// session can be asked, after a reload, whether the key that
    /// verified its token is still there; `None` for configured keys,
    /// which a reload does not change.
    fingerprint: Option<[u8; 32]>,
}

/// What a valid token says.
#[derive(Debug)]
pub struct Claims {
    /// `sub`: the principal's name.
    pub subject: String,
    /// The permissions claim, capped by the ceiling.
    pub grants: Grants,
    /// `exp`.
    pub expires: Option<SystemTime>,
    /// The fingerprint of the JWKS key that verified it (`None`: a
    /// configured key).
    pub key: Option<[u8; 32]>,
}

/// Checks tokens against the configured keys.
pub struct Verifier {
    cfg: JwtConfig,
    /// Keys from the config, then from the JWKS file; replaced whole on
    /// reload.
    keys: RwLock<Arc<Vec<Key>>>,
    configured: usize,
}

impl Verifier {
    /// Reads the configured keys and the JWKS file.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key entry or `auth.jwt.jwks_file`.
    pub fn new(cfg: &JwtConfig) -> Result<Verifier, ConfigError> {
        let mut keys = Vec::new();
        for (i, k) in cfg.keys.iter().enumerate() {
            let invalid = |reason: String| ConfigError::Invalid {
                key: format!("auth.jwt.keys[{i}]"),
                reason,
            };
            let algorithm: Algorithm = k
                .algorithm
                .parse()
                .map_err(|_| invalid(format!("unknown algorithm {:?}", k.algorithm)))?;
            let key = config_key(algorithm, &k.secret, &k.public_key_file).map_err(invalid)?;
            keys.push(Key {
                kid: (!k.kid.is_empty()).then(|| k.kid.clone()),
                algorithm,
                key,
                fingerprint: None,
            });
        }
        let configured = keys.len();
        if !cfg.jwks_file.as_os_str().is_empty() {
            keys.extend(
                read_jwks(&cfg.jwks_file).map_err(|reason| ConfigError::Invalid {
                    key: "auth.jwt.jwks_file".into(),
                    reason,
                })?,
            );
        }
        Ok(Verifier {
            cfg: cfg.clone(),
            keys: RwLock::new(Arc::new(keys)),
            configured,
        })
    }

    /// Re-reads the JWKS file; a bad file leaves the keys as they were.
    ///
    /// # Errors
    /// Why the file was not taken.
    pub fn reload(&self) -> Result<usize, String> {
        if self.cfg.jwks_file.as_os_str().is_empty() {
            return Ok(self.keys.read().len());
        }
        let fresh = read_jwks(&self.cfg.jwks_file)?;
        let mut keys = self.keys.write();
        let mut all: Vec<Key> = Vec::with_capacity(self.configured + fresh.len());
        // Config keys are not re-read: rebuild them from the old list.
        for k in keys.iter().take(self.configured) {
            all.push(Key {
                kid: k.kid.clone(),
                algorithm: k.algorithm,
                key: k.key.clone(),
                fingerprint: k.fingerprint,
            });
        }
        all.extend(fresh);
        let n = all.len();
        *keys = Arc::new(all);
        Ok(n)
    }

    /// Checks `token`'s signature and claims.
    ///
    /// # Errors
    /// Why the token is refused, for the log.
    pub fn verify(&self, token: &str) -> Result<Claims, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("header: {e}"))?;
        let keys = self.keys.read().clone();
        let candidates: Vec<&Key> = keys
            .iter()
            .filter(|k| k.algorithm == header.alg)
            .filter(|k| match (&k.kid, &header.kid) {
                (Some(want), Some(got)) => want == got,
                (Some(_), None) => false,
                (None, _) => true,
            })
            .collect();
        if candidates.is_empty() {
            return Err(format!(
                "no key for algorithm {:?} and kid {:?}",
                header.alg, header.kid
            ));
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.cfg.leeway_s;
        validation.validate_nbf = true;
        // A configured issuer or audience is required, not only checked
        // when present: a token without it is refused.
        let mut required = vec!["exp", "sub"];
        if !self.cfg.issuer.is_empty() {
            required.push("iss");
        }
        if !self.cfg.audience.is_empty() {
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        if self.cfg.issuer.is_empty() {
            validation.iss = None;
        } else {
            validation.set_issuer(&[&self.cfg.issuer]);
        }
        if self.cfg.audience.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&[&self.cfg.audience]);
        }
        let mut last = String::new();
        for key in candidates {
            match jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
                token,
                &key.key,
                &validation,
            ) {
                Ok(data) => return self.claims(data.claims, key.fingerprint),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// Whether the JWKS key with this fingerprint is still in force (a
    /// reload may have withdrawn it).
    pub fn has_key(&self, fingerprint: &[u8; 32]) -> bool {
        self.keys
            .read()
            .iter()
            .any(|k| k.fingerprint.as_ref() == Some(fingerprint))
    }

    fn claims(
        &self,
        mut claims: serde_json::Map<String, serde_json::Value>,
        key: Option<[u8; 32]>,
    ) -> Result<Claims, String> {
        let subject = match claims.get("sub") {
            Some(serde_json::Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err("sub must be a non-empty string".into()),
        };
        super::check_principal_name(&subject).map_err(|why| format!("sub {why}"))?;
        // The crate accepts a fractional `exp` (a NumericDate may have
        // one): read it as a float, or it would never be enforced.
        let expires = claims
            .get("exp")
            .and_then(serde_json::Value::as_f64)
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(s.min(1e12)));
        let permissions: Permissions = match claims.remove(&self.cfg.claim) {
            None => Permissions::default(),
            Some(v) => {
                serde_json::from_value(v).map_err(|e| format!("claim {:?}: {e}", self.cfg.claim))?
            }
        };
        permissions
            .validate(&self.cfg.claim)
            .map_err(|e| e.to_string())?;
        let grants =
            Grants::new(&permissions, &subject).capped(Grants::new(&self.cfg.ceiling, &subject));
        Ok(Claims {
            subject,
            grants,
            expires,
            key,
        })
    }
}

/// A key given in the config: a secret for HS*, a PEM file otherwise.
fn config_key(algorithm: Algorithm, secret: &str, pem: &Path) -> Result<DecodingKey, String> {
    use Algorithm as A;
    let read = || {
        if pem.as_os_str().is_empty() {
            return Err(format!("{algorithm:?} needs public_key_file"));
        }
        std::fs::read(pem).map_err(|e| format!("cannot read {}: {e}", pem.display()))
    };
    let key = match algorithm {
        A::HS256 | A::HS384 | A::HS512 => {
            if secret.len() < 32 {
                return Err(format!("{algorithm:?} needs a secret of at least 32 bytes"));
            }
            return Ok(DecodingKey::from_secret(secret.as_bytes()));
        }
        A::RS256 | A::RS384 | A::RS512 | A::PS256 | A::PS384 | A::PS512 => {
            DecodingKey::from_rsa_pem(&read()?)
        }
        A::ES256 | A::ES384 => DecodingKey::from_ec_pem(&read()?),
        A::EdDSA => DecodingKey::from_ed_pem(&read()?),
    };
    if !secret.is_empty() {
        return Err(format!("{algorithm:?} takes public_key_file, not secret"));
    }
    key.map_err(|e| {
        format!(
            "{}: not a usable {algorithm:?} public key: {e}",
            pem.display()
        )
    })
}

/// The keys of a JWKS file; each must say its algorithm (`alg`) or have
/// one that follows from its type (RSA: RS256, P-256: ES256, Ed25519:
/// EdDSA).
fn read_jwks(path: &Path) -> Result<Vec<Key>, String> {
    use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let set: JwkSet =
        serde_json::from_str(&text).map_err(|e| format!("{}: not a JWKS: {e}", path.display()))?;
    let mut keys = Vec::with_capacity(set.keys.len());
    for (i, jwk) in set.keys.iter().enumerate() {
        let algorithm = match (&jwk.common.key_algorithm, &jwk.algorithm) {
            (Some(a), _) => a
                .to_string()
                .parse::<Algorithm>()
                .map_err(|_| format!("keys[{i}]: {a} is not a signature algorithm"))?,
            (None, AlgorithmParameters::RSA(_)) => Algorithm::RS256,
            (None, AlgorithmParameters::EllipticCurve(p)) if p.curve == EllipticCurve::P256 => {
                Algorithm::ES256
            }
            (None, AlgorithmParameters::OctetKeyPair(_)) => Algorithm::EdDSA,
            (None, _) => return Err(format!("keys[{i}]: needs \"alg\"")),
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("keys[{i}]: {e}"))?;
        let fingerprint = serde_json::to_vec(jwk)
            .map(|bytes| <sha2::Sha256 as sha2::Digest>::digest(bytes).into())
            .map_err(|e| format!("keys[{i}]: {e}"))?;
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            algorithm,
            key,
            fingerprint: Some(fingerprint),
        });
    }
    Ok(keys)
}
