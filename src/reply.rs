//! A response the gateway has decided on, before a front writes it: what a
//! route answers, and what `error.rs` turns every error into.

use bytes::Bytes;

/// A response ready to be written: status, extra headers, body (JSON but
/// for the OAuth flow's pages).
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Headers besides Content-Type and Content-Length.
    pub headers: Vec<(&'static str, String)>,
    /// The body's `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Bytes,
    /// Whether the connection must close after this reply (the request body
    /// was not drained).
    pub close: bool,
}

impl Reply {
    /// A 200 with a JSON body.
    pub fn ok(body: Bytes) -> Reply {
        Reply::json(200, body)
    }

    /// A JSON body with this status.
    pub fn json(status: u16, body: Bytes) -> Reply {
        Reply { status, headers: Vec::new(), content_type: JSON, body, close: false }
    }

    /// A small HTML page for a person at a browser, never cached and never
    /// framed.
    pub fn page(status: u16, title: &str, text: &str) -> Reply {
        let body = format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
             <body><h1>{title}</h1><p>{text}</p></body></html>\n",
            title = html_escape(title),
            text = html_escape(text)
        );
        Reply {
            status,
            headers: vec![
                ("cache-control", "no-store".to_owned()),
                ("x-frame-options", "DENY".to_owned()),
                ("content-security-policy", "default-src 'none'; frame-ancestors 'none'".to_owned()),
                ("referrer-policy", "no-referrer".to_owned()),
            ],
            content_type: HTML,
            body: Bytes::from(body),
            close: false,
        }
    }

    /// A 302 to `location`, not cached, sending no `Referer` on.
    pub fn redirect(location: String) -> Reply {
        Reply {
            status: 302,
            headers: vec![
                ("location", location),
                ("cache-control", "no-store".to_owned()),
                ("referrer-policy", "no-referrer".to_owned()),
            ],
            content_type: HTML,
            body: Bytes::new(),
            close: false,
        }
    }
}

/// `application/json`.
pub const JSON: &str = "application/json";
/// `text/html; charset=utf-8`.
pub const HTML: &str = "text/html; charset=utf-8";

/// `text` safe inside HTML text and attribute values.
pub(crate) fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
