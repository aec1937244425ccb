use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

use super::*;
use crate::config::auth::{JwtConfig, JwtKeyConfig, Permissions, TokenConfig, UserConfig};

const SECRET: &str = "0123456789abcdef0123456789abcdef-test";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/jwt")
        .join(name)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn jwt_config() -> JwtConfig {
    let key = |algorithm: &str, file: &str| JwtKeyConfig {
        algorithm: algorithm.into(),
        public_key_file: fixture(file),
        ..JwtKeyConfig::default()
    };
    JwtConfig {
        keys: vec![
            JwtKeyConfig {
                algorithm: "HS256".into(),
                secret: SECRET.into(),
                ..JwtKeyConfig::default()
            },
            key("RS256", "rsa_public.pem"),
            key("ES256", "ec_public.pem"),
            key("EdDSA", "ed_public.pem"),
        ],
        issuer: "https://id.example".into(),
        audience: "wharf".into(),
        leeway_s: 5,
        ..JwtConfig::default()
    }
}

fn auth() -> Auth {
    let cfg = AuthConfig {
        users: vec![UserConfig {
            name: "alice".into(),
            password_hash: hash_password(b"wonderland").unwrap(),
            allow: Permissions {
                publish: vec!["home/%u/#".into()],
                ..Permissions::default()
            },
        }],
        tokens: vec![TokenConfig {
            name: "svc".into(),
            token_sha256: token_digest("svc-token"),
            allow: Permissions {
                enqueue: vec!["orders".into()],
                ..Permissions::default()
            },
        }],
        jwt: jwt_config(),
        max_failures: 3,
        ..AuthConfig::default()
    };
    cfg.validate().unwrap();
    Auth::new(&cfg).unwrap()
}

fn claims(extra: serde_json::Value) -> serde_json::Value {
    let mut c = json!({
        "sub": "dev-1",
        "iss": "https://id.example",
        "aud": "wharf",
        "exp": now() + 600,
        "wharf": {"publish": ["dev/%u/#"], "subscribe": ["cmd/#"]},
    });
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

fn sign(alg: Algorithm, claims: &serde_json::Value) -> String {
    let key = match alg {
        Algorithm::HS256 => EncodingKey::from_secret(SECRET.as_bytes()),
        Algorithm::RS256 => {
            EncodingKey::from_rsa_pem(&std::fs::read(fixture("rsa_private.pem")).unwrap()).unwrap()
        }
        Algorithm::ES256 => {
            EncodingKey::from_ec_pem(&std::fs::read(fixture("ec_private.pem")).unwrap()).unwrap()
        }
        Algorithm::EdDSA => {
            EncodingKey::from_ed_pem(&std::fs::read(fixture("ed_private.pem")).unwrap()).unwrap()
        }
        other => panic!("no test key for {other:?}"),
    };
    jsonwebtoken::encode(&Header::new(alg), claims, &key).unwrap()
}

async fn token(auth: &Auth, t: &str) -> Result<Principal, AuthError> {
    auth.authenticate(Credential::Token(t), None, Way::Http)
        .await
}

#[actix_rt::test]
async fn every_algorithm_verifies_and_grants_its_claim() {
    let auth = auth();
    for alg in [
        Algorithm::HS256,
        Algorithm::RS256,
        Algorithm::ES256,
        Algorithm::EdDSA,
    ] {
        let p = token(&auth, &sign(alg, &claims(json!({})))).await;
        let p = p.unwrap_or_else(|e| panic!("{alg:?}: {e}"));
        assert_eq!(p.name(), "dev-1");
        assert_eq!(p.via(), Via::Jwt);
        assert!(p.may(Right::Publish("dev/dev-1/t")), "{alg:?}");
        assert!(!p.may(Right::Publish("dev/dev-2/t")), "{alg:?}");
        assert!(p.may(Right::Subscribe("cmd/+")));
        assert!(!p.may(Right::Admin));
        assert!(p.expires().is_some());
    }
}

#[actix_rt::test]
async fn bad_jwts_are_refused() {
    let auth = auth();
    let cases = [
        (
            "expired",
            sign(Algorithm::HS256, &claims(json!({"exp": now() - 60}))),
        ),
        (
            "not yet valid",
            sign(Algorithm::HS256, &claims(json!({"nbf": now() + 600}))),
        ),
        (
            "wrong issuer",
            sign(Algorithm::HS256, &claims(json!({"iss": "evil"}))),
        ),
        (
            "wrong audience",
            sign(Algorithm::HS256, &claims(json!({"aud": "other"}))),
        ),
        (
            "no exp",
            sign(Algorithm::HS256, &claims(json!({"exp": null}))),
        ),
        (
            "no sub",
            sign(Algorithm::HS256, &claims(json!({"sub": null}))),
        ),
        (
            "bad permissions claim",
            sign(
                Algorithm::HS256,
                &claims(json!({"wharf": {"publish": "x"}})),
            ),
        ),
    ];
    for (why, t) in cases {
        assert_eq!(token(&auth, &t).await.unwrap_err(), AuthError::Bad, "{why}");
    }
    // Signed with another secret.
    let other = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(json!({})),
        &EncodingKey::from_secret(b"another secret that is long enough!!"),
    )
    .unwrap();
    assert_eq!(token(&auth, &other).await.unwrap_err(), AuthError::Bad);
    // alg: none, with the signature stripped.
    let good = sign(Algorithm::HS256, &claims(json!({})));
    let payload = good.split('.').nth(1).unwrap();
    let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{payload}.");
    assert_eq!(token(&auth, &none).await.unwrap_err(), AuthError::Bad);
    // Algorithm confusion: HS256 "signed" with the RSA public key as the
    // secret must not pass as the RS256 key.
    let only_rsa = AuthConfig {
        jwt: JwtConfig {
            keys: vec![JwtKeyConfig {
                algorithm: "RS256".into(),
                public_key_file: fixture("rsa_public.pem"),
                ..JwtKeyConfig::default()
            }],
            ..jwt_config()
        },
        ..AuthConfig::default()
    };
    let rsa_only = Auth::new(&only_rsa).unwrap();
    let pem = std::fs::read(fixture("rsa_public.pem")).unwrap();
    let confused = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(json!({})),
        &EncodingKey::from_secret(&pem),
    )
    .unwrap();
    assert_eq!(
        token(&rsa_only, &confused).await.unwrap_err(),
        AuthError::Bad
    );
    assert!(
        token(&rsa_only, &sign(Algorithm::RS256, &claims(json!({}))))
            .await
            .is_ok()
    );
}

#[actix_rt::test]
async fn ceiling_caps_what_a_token_claims() {
    let cfg = AuthConfig {
        jwt: JwtConfig {
            ceiling: Permissions {
                publish: vec!["dev/#".into()],
                ..Permissions::default()
            },
            ..jwt_config()
        },
        ..AuthConfig::default()
    };
    let auth = Auth::new(&cfg).unwrap();
    let t = sign(
        Algorithm::HS256,
        &claims(json!({"wharf": {"publish": ["#"], "admin": true}})),
    );
    let p = token(&auth, &t).await.unwrap();
    assert!(p.may(Right::Publish("dev/x")));
    assert!(!p.may(Right::Publish("other")));
    assert!(!p.may(Right::Admin));
}

#[actix_rt::test]
async fn passwords_tokens_and_failures() {
    let auth = auth();
    let pw = |user: &'static str, password: &'static [u8]| Credential::Password { user, password };
    let alice = auth
        .authenticate(pw("alice", b"wonderland"), None, Way::Http)
        .await
        .unwrap();
    assert_eq!((alice.name(), alice.via()), ("alice", Via::Password));
    assert!(alice.may(Right::Publish("home/alice/lamp")));
    assert!(!alice.may(Right::Publish("home/bob/lamp")));
    // Remembered: the second check does not hash (and still answers).
    assert!(
        auth.authenticate(pw("alice", b"wonderland"), None, Way::Http)
            .await
            .is_ok()
    );
    assert_eq!(
        auth.authenticate(pw("alice", b"nope"), None, Way::Http)
            .await
            .unwrap_err(),
        AuthError::Bad
    );
    let svc = token(&auth, "svc-token").await.unwrap();
    assert!(svc.may(Right::Enqueue("orders")));
    // A token in the password field, whatever the user name.
    let svc2 = auth
        .authenticate(pw("anything", b"svc-token"), None, Way::Http)
        .await
        .unwrap();
    assert_eq!(svc2.name(), "svc");
    assert_eq!(token(&auth, "wrong").await.unwrap_err(), AuthError::Bad);

    let ip: IpAddr = [192, 0, 2, 7].into();
    for _ in 0..3 {
        let e = auth
            .authenticate(Credential::Token("wrong"), Some(ip), Way::Http)
            .await;
        assert_eq!(e.unwrap_err(), AuthError::Bad);
    }
    let e = auth
        .authenticate(Credential::Token("svc-token"), Some(ip), Way::Http)
        .await;
    assert_eq!(
        e.unwrap_err(),
        AuthError::TooManyFailures,
        "blocked even with a good token"
    );
    assert!(
        auth.authenticate(Credential::Token("svc-token"), None, Way::Http)
            .await
            .is_ok()
    );
    assert!(auth.required(), "credentials configured: no anonymous");
}

#[actix_rt::test]
async fn a_configured_issuer_and_audience_are_required() {
    let a = auth();
    assert!(
        token(&a, &sign(Algorithm::HS256, &claims(json!({}))))
            .await
            .is_ok()
    );
    for missing in ["iss", "aud"] {
        let t = sign(Algorithm::HS256, &claims(json!({ missing: null })));
        assert!(
            matches!(token(&a, &t).await, Err(AuthError::Bad)),
            "a JWT without {missing} was accepted"
        );
    }
}

#[actix_rt::test]
async fn principal_names_with_wildcards_or_separators_are_refused_from_every_source() {
    let a = auth();
    // A JWT's sub.
    for sub in ["+", "#", "dev/victim", "$SYS", "a\u{0}b", "tab\t"] {
        let t = sign(Algorithm::HS256, &claims(json!({ "sub": sub })));
        assert!(
            matches!(token(&a, &t).await, Err(AuthError::Bad)),
            "a JWT with sub {sub:?} was accepted"
        );
    }
    // An MQTT (or HTTP Basic) user name.
    for user in ["+", "#", "a/b"] {
        let r = a
            .authenticate(
                Credential::Password {
                    user,
                    password: b"svc-token",
                },
                None,
                Way::Http,
            )
            .await;
        assert!(
            matches!(r, Err(AuthError::Bad)),
            "user name {user:?} was accepted"
        );
    }
    // Users and tokens in the config.
    for name in ["#", "+", "a/b", "$x", "nul\u{0}"] {
        let user = AuthConfig {
            users: vec![UserConfig {
                name: name.into(),
                password_hash: hash_password(b"x").unwrap(),
                allow: Permissions::default(),
            }],
            ..AuthConfig::default()
        };
        let e = user.validate().unwrap_err().to_string();
        assert!(e.starts_with("auth.users[0].name"), "{name:?}: {e}");
        let token = AuthConfig {
            tokens: vec![TokenConfig {
                name: name.into(),
                token_sha256: token_digest("t"),
                allow: Permissions::default(),
            }],
            ..AuthConfig::default()
        };
        let e = token.validate().unwrap_err().to_string();
        assert!(e.starts_with("auth.tokens[0].name"), "{name:?}: {e}");
    }
    // And a name made in code that slipped past all of them gets no `%u`
    // grant at all, so it cannot reach anyone's topics.
    let g = Grants::new(
        &Permissions {
            publish: vec!["dev/%u/#".into(), "pub/#".into()],
            ..Permissions::default()
        },
        "#",
    );
    assert!(!g.may(Right::Publish("dev/victim/x")));
    assert!(g.may(Right::Publish("pub/x")));
}

#[actix_rt::test]
async fn an_unknown_user_costs_a_password_check_too() {
    // So that the time taken does not tell which user names exist: a
    // wrong password runs one argon2 check whether or not the user
    // exists (counted, not timed).
    let a = auth();
    let checked = || {
        a.0.hashes_checked
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    for user in ["alice", "nobody"] {
        let before = checked();
        let r = a
            .authenticate(
                Credential::Password {
                    user,
                    password: b"nope",
                },
                None,
                Way::Http,
            )
            .await;
        assert!(matches!(r, Err(AuthError::Bad)), "{user}");
        assert_eq!(checked(), before + 1, "{user}: one password check");
    }
}

#[actix_rt::test]
async fn one_address_cannot_fill_the_password_check_queue() {
    // A flood of wrong passwords from one address (its failure limit set
    // high): past its share, its checks are refused as busy at once,
    // while another address's login goes through meanwhile.
    let cfg = AuthConfig {
        users: vec![UserConfig {
            name: "alice".into(),
            password_hash: hash_password(b"wonderland").unwrap(),
            allow: Permissions::default(),
        }],
        max_failures: 1000,
        ..AuthConfig::default()
    };
    let a = Auth::new(&cfg).unwrap();
    let flood: std::net::IpAddr = [10, 0, 0, 1].into();
    let legit: std::net::IpAddr = [10, 0, 0, 2].into();
    let wrong = |i: usize| {
        let a = a.clone();
        async move {
            let pw = format!("guess-{i}");
            a.authenticate(
                Credential::Password {
                    user: "alice",
                    password: pw.as_bytes(),
                },
                Some(flood),
                Way::Http,
            )
            .await
        }
    };
    let guesses = futures_util::future::join_all((0..20).map(wrong));
    let login = a.authenticate(
        Credential::Password {
            user: "alice",
            password: b"wonderland",
        },
        Some(legit),
        Way::Http,
    );
    let (guesses, login) = futures_util::future::join(guesses, login).await;
    assert!(login.is_ok(), "the other address's login: {login:?}");
    let busy = guesses
        .iter()
        .filter(|r| matches!(r, Err(AuthError::Busy)))
        .count();
    let checked = guesses
        .iter()
        .filter(|r| matches!(r, Err(AuthError::Bad)))
        .count();
    assert_eq!(
        checked,
        super::hashing::MAX_HASHING_PER_PEER as usize,
        "{guesses:?}"
    );
    assert_eq!(busy, 20 - checked, "{guesses:?}");
}

#[tokio::test]
async fn credentials_sent_to_a_broker_without_users_say_so() {
    let open = Auth::open();
    let Err((AuthError::Bad, why)) = open.password("dashboard", b"secret", None).await else {
        panic!("a password on a broker with no users was not refused as bad");
    };
    assert!(
        why.starts_with("no users or tokens are configured"),
        "{why}"
    );
    // With users configured, an unknown token is just that.
    let Err((AuthError::Bad, why)) = auth().token("nope") else {
        panic!("an unknown token was not refused");
    };
    assert_eq!(why, "unknown token");
}

#[test]
fn anonymous_follows_the_config() {
    assert!(
        Auth::open()
            .anonymous()
            .is_some_and(|p| p.may(Right::Admin))
    );
    let off = AuthConfig {
        anonymous: Some(false),
        ..AuthConfig::default()
    };
    assert!(Auth::new(&off).unwrap().required());
}

#[test]
fn exposure_check() {
    let public: std::net::SocketAddr = "0.0.0.0:7878".parse().unwrap();
    let local: std::net::SocketAddr = "127.0.0.1:7878".parse().unwrap();
    let open = AuthConfig::default();
    assert!(open.check_exposure(&[local]).is_ok());
    let e = open.check_exposure(&[public]).unwrap_err();
    assert!(e.to_string().starts_with("auth.anonymous"), "{e}");
    let on_purpose = AuthConfig {
        anonymous: Some(true),
        ..AuthConfig::default()
    };
    assert!(on_purpose.check_exposure(&[public]).is_ok());
}

#[test]
fn jwks_file_loads_and_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    let k = |kid: &str| {
        json!({"kty": "oct", "alg": "HS256", "kid": kid,
               "k": base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, SECRET)})
    };
    std::fs::write(&path, json!({"keys": [k("one")]}).to_string()).unwrap();
    let cfg = JwtConfig {
        jwks_file: path.clone(),
        ..JwtConfig::default()
    };
    let v = jwt::Verifier::new(&cfg).unwrap();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("two".into());
    let t = jsonwebtoken::encode(
        &header,
        &claims(json!({"iss": null, "aud": null})),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    assert!(v.verify(&t).is_err(), "kid two is not known yet");
    std::fs::write(&path, "not json").unwrap();
    assert!(v.reload().is_err(), "a bad file is refused");
    std::fs::write(&path, json!({"keys": [k("one"), k("two")]}).to_string()).unwrap();
    assert_eq!(v.reload().unwrap(), 2);
    assert!(v.verify(&t).is_ok(), "kid two after the reload");
}

#[actix_rt::test]
async fn a_jwt_sub_equal_to_a_token_name_is_another_principal() {
    let auth = auth();
    let svc = token(&auth, "svc-token").await.unwrap();
    let jwt = token(
        &auth,
        &sign(Algorithm::HS256, &claims(json!({"sub": "svc"}))),
    )
    .await
    .unwrap();
    assert_eq!((svc.name(), jwt.name()), ("svc", "svc"));
    assert_ne!(svc.id(), jwt.id());
    assert_ne!(svc.namespace("c1"), jwt.namespace("c1"));
    assert_eq!(svc.namespace("c1"), "~token:svc~c1");
    let anon = Auth::open().anonymous().unwrap();
    assert_eq!(anon.namespace("c1"), "c1");
    assert_eq!(
        anon.namespace("~token:svc~c1"),
        "%7Etoken:svc~c1",
        "no spoofing"
    );
}
