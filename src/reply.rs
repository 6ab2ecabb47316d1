//! A response the gateway has decided on, before a front writes it: what a
//! route answers, and what `error.rs` turns every error into.

use bytes::Bytes;

/// A response ready to be written: status, extra headers, JSON body.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Headers besides Content-Type and Content-Length.
    pub headers: Vec<(&'static str, String)>,
    /// The JSON body.
    pub body: Bytes,
    /// Whether the connection must close after this reply (the request body
    /// was not drained).
    pub close: bool,
}

impl Reply {
    /// A 200 with a JSON body.
    pub fn ok(body: Bytes) -> Reply {
        Reply { status: 200, headers: Vec::new(), body, close: false }
    }
}
