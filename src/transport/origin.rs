//! What a browser can be made to send: cross-site requests and DNS
//! rebinding.
//!
//! - A browser lets any web page open a WebSocket to any address,
//!   `ws://127.0.0.1:7878/ws` included, and send a form or a `text/plain`
//!   POST there, with the page's `Origin`. An upgrade or a request that
//!   changes something (not GET, HEAD or OPTIONS) whose `Origin` is
//!   present, not the broker's own, and not in `[server] allowed_origins`
//!   is refused with 403 `forbidden_origin`; clients that send no `Origin`
//!   (every non-browser client) are unaffected.
//! - A page on a name its owner controls can make that name resolve to
//!   the user's own machine (DNS rebinding): the browser then thinks the
//!   broker is the page's own origin, and the `Origin` check passes. So
//!   the `Host` of every upgrade and of every request through `Caller`
//!   (every route but `/health` and the dashboard's static page, which
//!   carry no data) must name the broker: an IP address (which no
//!   one can rebind), `localhost` or a name under `.localhost`, or a name
//!   in `[server] allowed_hosts`; anything else is refused with 403
//!   `forbidden_host`, before credentials are looked at.

use std::net::IpAddr;

use actix_web::HttpRequest;
use actix_web::http::{Method, header};

use super::ApiError;
use super::error::HttpCode;

/// Checks an HTTP request as [`guard`] says: its `Host` always, its
/// `Origin` when it changes something.
///
/// # Errors
/// `403 forbidden_host` or `403 forbidden_origin`.
pub(crate) fn guard(
    req: &HttpRequest,
    server: &crate::config::ServerConfig,
) -> Result<(), ApiError> {
    check_host(req, &server.allowed_hosts)?;
    if !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        check(req, &server.allowed_origins)?;
    }
    Ok(())
}

/// Checks a WebSocket upgrade: its `Host`, and its `Origin` (every
/// upgrade comes from a page, if from a browser).
///
/// # Errors
/// `403 forbidden_host` or `403 forbidden_origin`.
pub(crate) fn upgrade(
    req: &HttpRequest,
    server: &crate::config::ServerConfig,
) -> Result<(), ApiError> {
    check_host(req, &server.allowed_hosts)?;
    check(req, &server.allowed_origins)
}

/// Checks a request's `Host` against the names the broker answers to. A
/// request without one (HTTP/1.0, not a browser) passes.
///
/// # Errors
/// `403 forbidden_host`.
pub(crate) fn check_host(req: &HttpRequest, allowed: &[String]) -> Result<(), ApiError> {
    let Some(host) = req.headers().get(header::HOST) else {
        return Ok(());
    };
    let host = host.to_str().unwrap_or("").trim();
    if host_allowed(host, allowed) {
        return Ok(());
    }
    tracing::info!(
        peer = ?req.peer_addr(),
        path = req.path(),
        host,
        "refused a request for a host name the broker does not answer to (add it to [server] allowed_hosts)"
    );
    Err(ApiError::http(
        HttpCode::ForbiddenHost,
        format!(
            "this broker does not answer to the host name {host:?}; \
             list it in [server] allowed_hosts"
        ),
    ))
}

/// Whether `host` (a `Host` header: a name or address, maybe a port) is
/// one the broker answers to.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    if allowed.iter().any(|a| a == "*") {
        return true;
    }
    // The name without its port: `[::1]:7878`, `127.0.0.1:7878`, `name:80`.
    let name = if let Some(rest) = host.strip_prefix('[') {
        return rest
            .split_once(']')
            .is_some_and(|(ip, _)| ip.parse::<IpAddr>().is_ok());
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        }
    };
    if name.parse::<IpAddr>().is_ok() {
        return true;
    }
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || allowed
            .iter()
            .any(|a| a.trim_end_matches('.').eq_ignore_ascii_case(&name))
}

/// Checks a WebSocket upgrade's (or a changing request's) `Origin`
/// against `allowed` (`"*"` allows every origin).
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
        "refused a request from a foreign origin (add it to [server] allowed_origins)"
    );
    Err(ApiError::http(
        HttpCode::ForbiddenOrigin,
        format!(
            "WebSocket upgrades and changes from origin {origin:?} are not allowed; \
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

    #[test]
    fn hosts() {
        let none: Vec<String> = Vec::new();
        for ok in [
            "127.0.0.1:7878",
            "127.0.0.1",
            "[::1]:7878",
            "[::1]",
            "10.0.0.5:80",
            "localhost:7878",
            "LOCALHOST",
            "app.localhost:7878",
            "localhost.",
        ] {
            assert!(host_allowed(ok, &none), "{ok}");
        }
        for bad in [
            "evil.example:7878",
            "evil.example",
            "localhost.evil.example",
            "[evil]:80",
            "",
        ] {
            assert!(!host_allowed(bad, &none), "{bad}");
        }
        let listed = vec!["broker.example.com".to_owned()];
        assert!(host_allowed("broker.example.com:7878", &listed));
        assert!(host_allowed("BROKER.example.com", &listed));
        assert!(!host_allowed("other.example.com", &listed));
        assert!(host_allowed("anything.example", &["*".to_owned()]));
    }
}
