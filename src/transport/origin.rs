//! Cross-site WebSocket hijacking: a browser lets any web page open a
//! WebSocket to any address, `ws://127.0.0.1:7878/ws` included, and sends
//! the page's `Origin` with the upgrade. An upgrade whose `Origin` is
//! present, not the broker's own, and not in `[server] allowed_origins` is
//! refused with 403; clients that send no `Origin` (every non-browser
//! client) are unaffected.

use actix_web::HttpRequest;
use actix_web::http::header;

use super::ApiError;
use super::error::HttpCode;

/// Checks a WebSocket upgrade's `Origin` against `allowed` (`"*"` allows
/// every origin).
///
/// # Errors
/// `403 forbidden_origin` for an origin that is neither the broker's own
/// (its host and port are the request's `Host`) nor listed.
pub(crate) fn check(req: &HttpRequest, allowed: &[String]) -> Result<(), ApiError> {
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("").trim();
    if allowed
        .iter()
        .any(|a| a == "*" || a.eq_ignore_ascii_case(origin))
    {
        return Ok(());
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let authority = origin
        .split_once("://")
        .map_or("", |(_, rest)| rest.trim_end_matches('/'));
    if !host.is_empty() && same_authority(authority, host, origin.starts_with("https://")) {
        return Ok(());
    }
    tracing::info!(
        peer = ?req.peer_addr(),
        path = req.path(),
        origin,
        "refused a WebSocket upgrade from a foreign origin (add it to [server] allowed_origins)"
    );
    Err(ApiError::http(
        HttpCode::ForbiddenOrigin,
        format!(
            "WebSocket upgrades from origin {origin:?} are not allowed; \
             list it in [server] allowed_origins"
        ),
    ))
}

/// Whether an origin's `host[:port]` names the same place as the request's
/// `Host`, with the scheme's default port filled in where one is left out.
fn same_authority(origin: &str, host: &str, https: bool) -> bool {
    let default = if https { "443" } else { "80" };
    let with_port = |a: &str| -> String {
        let a = a.to_ascii_lowercase();
        // An IPv6 literal ends in ']' when it has no port.
        if a.ends_with(']') || !a.contains(':') {
            format!("{a}:{default}")
        } else {
            a
        }
    };
    with_port(origin) == with_port(host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::StatusCode;
    use actix_web::test::TestRequest;

    fn req(origin: Option<&str>) -> HttpRequest {
        let mut r = TestRequest::get()
            .uri("/ws")
            .insert_header((header::HOST, "127.0.0.1:7878"));
        if let Some(o) = origin {
            r = r.insert_header((header::ORIGIN, o));
        }
        r.to_http_request()
    }

    #[test]
    fn origins() {
        let none: Vec<String> = Vec::new();
        assert!(check(&req(None), &none).is_ok(), "no Origin: not a browser");
        assert!(check(&req(Some("http://127.0.0.1:7878")), &none).is_ok());
        let err = check(&req(Some("https://evil.example")), &none).unwrap_err();
        assert_eq!(
            (err.status, err.code),
            (StatusCode::FORBIDDEN, "forbidden_origin")
        );
        assert!(check(&req(Some("http://127.0.0.1:7879")), &none).is_err());
        assert!(check(&req(Some("null")), &none).is_err());
        let listed = vec!["https://app.example".to_owned()];
        assert!(check(&req(Some("https://app.example")), &listed).is_ok());
        assert!(check(&req(Some("https://other.example")), &listed).is_err());
        assert!(check(&req(Some("https://other.example")), &["*".to_owned()]).is_ok());
        assert!(same_authority("example.com", "example.com:80", false));
        assert!(same_authority("example.com", "EXAMPLE.com:443", true));
        assert!(!same_authority("example.com", "example.com:8080", false));
        assert!(same_authority("[::1]:7878", "[::1]:7878", false));
    }
}
