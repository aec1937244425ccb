//! `GET /client.js`: the JavaScript client (`clients/js`, built to one ES
//! module with no dependencies), compiled into the binary, so that a page
//! imports it from the broker it talks to with no bundler and nothing
//! fetched from elsewhere. It holds no secret: anyone may fetch it, from
//! any origin (module scripts need CORS), and what it then does is
//! checked like any other client.

use std::sync::OnceLock;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};

/// The built client, `clients/js/dist/wharf.js` (`npm run build` there;
/// `npm run check-dist` fails when it is stale).
pub const CLIENT_JS: &str = include_str!("../../clients/js/dist/wharf.js");

/// The client's entity tag: a hash of its bytes, so a browser that has it
/// revalidates with a 304 instead of fetching it again.
fn etag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        // FNV-1a: not for security, only to tell versions apart.
        let hash = CLIENT_JS.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("\"{hash:016x}\"")
    })
}

/// `GET /client.js`.
pub(crate) async fn client_js(req: HttpRequest) -> HttpResponse {
    let tag = etag();
    let fresh = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut answer = if fresh {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    answer
        .insert_header((header::CONTENT_TYPE, "text/javascript; charset=utf-8"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::ETAG, tag))
        .insert_header((header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"));
    if fresh {
        answer.finish()
    } else {
        answer.body(CLIENT_JS)
    }
}
