//! Errors of the HTTP front, and the one place they become a status and a body.
//!
//! Messages never reveal more than the caller may see: upstream names and
//! internal detail go to `developer_message`, secrets go nowhere.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::Value;

use crate::catalog::LookupError;
use crate::resolve::ToolIdError;
use crate::wire::{ServerErrorBody, ValidationErrorBody, SCHEMA};

/// Everything that ends a front request with an error status.
#[derive(Debug, thiserror::Error)]
pub enum FrontError {
    /// No such endpoint.
    #[error("no route for {0}")]
    NotFound(String),
    /// The endpoint exists but not for this method.
    #[error("method not allowed; allowed: {allow}")]
    MethodNotAllowed {
        /// The `Allow` header value.
        allow: &'static str,
    },
    /// The body exceeds `server.max_body_bytes`.
    #[error("request body over {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The body could not be read off the connection.
    #[error("could not read the request body: {0}")]
    BodyUnreadable(String),
    /// Not JSON, not UTF-8, or fields of the wrong type.
    #[error("malformed call: {0}")]
    MalformedCall(String),
    /// A `$schema` naming a version the gateway does not speak.
    #[error("unsupported $schema {0:?}")]
    UnsupportedSchema(String),
    /// No `tool_id`.
    #[error("no tool_id")]
    MissingToolId,
    /// A `tool_id` that is not `Toolkit.Name[@version]`.
    #[error(transparent)]
    InvalidToolId(#[from] ToolIdError),
    /// No such tool or version.
    #[error(transparent)]
    Lookup(#[from] LookupError),
    /// The input does not match the tool's `input_schema`.
    #[error("invalid input: {0:?}")]
    InvalidInput(BTreeMap<String, String>),
    /// No upstream serving the tool could be reached; nothing was sent.
    #[error("tool server unavailable: {0}")]
    Unavailable(String),
    /// The upstream itself refused the call before running the tool (its 400
    /// or 422), passed on with its status.
    #[error("tool server refused the call with HTTP {status}")]
    UpstreamRefused {
        /// 400 or 422.
        status: u16,
        /// The upstream's error body.
        body: Value,
    },
}

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

impl FrontError {
    /// The HTTP status for this error (seed 003's 400 / 422 taxonomy).
    pub fn status(&self) -> u16 {
        match self {
            FrontError::NotFound(_) => 404,
            FrontError::MethodNotAllowed { .. } => 405,
            FrontError::BodyTooLarge { .. } => 413,
            FrontError::InvalidInput(_) => 422,
            FrontError::UpstreamRefused { status, .. } => *status,
            FrontError::BodyUnreadable(_)
            | FrontError::MalformedCall(_)
            | FrontError::UnsupportedSchema(_)
            | FrontError::MissingToolId
            | FrontError::InvalidToolId(_)
            | FrontError::Lookup(_)
            | FrontError::Unavailable(_) => 400,
        }
    }

    /// The message a person (or a model) reads.
    fn message(&self) -> String {
        match self {
            FrontError::NotFound(_) => "There is nothing at this path".into(),
            FrontError::MethodNotAllowed { allow } => format!("This endpoint only accepts {allow}"),
            FrontError::BodyTooLarge { limit } => format!("The request body is larger than the {limit} bytes allowed"),
            FrontError::BodyUnreadable(_) => "The request body could not be read".into(),
            FrontError::MalformedCall(_) => "The request body is not a valid tool call".into(),
            FrontError::UnsupportedSchema(s) => format!("OTC version {s:?} is not supported; use otc://1.0"),
            FrontError::MissingToolId => "The request has no tool_id".into(),
            FrontError::InvalidToolId(e) => format!("Invalid tool id: {e}"),
            FrontError::Lookup(LookupError::UnknownTool(key))
            | FrontError::Lookup(LookupError::UnknownVersion { key, .. }) => format!("Tool '{key}' was not found"),
            FrontError::InvalidInput(_) => "Some input parameters are invalid".into(),
            FrontError::Unavailable(_) => "The tool server is temporarily unavailable".into(),
            FrontError::UpstreamRefused { .. } => "The tool server refused the call".into(),
        }
    }

    /// Extra detail for developers and logs; never shown to a model.
    fn developer_message(&self) -> Option<String> {
        match self {
            FrontError::NotFound(path) => {
                Some(format!("{path} is not served; the gateway serves GET /health, GET /tools, POST /tools/call and POST /call"))
            }
            FrontError::MethodNotAllowed { allow } => Some(format!("send this path with {allow}; see the Allow header")),
            FrontError::InvalidInput(_) | FrontError::UpstreamRefused { .. } => None,
            FrontError::BodyTooLarge { .. } => Some("raise server.max_body_bytes to accept larger calls".into()),
            FrontError::UnsupportedSchema(_) => {
                Some("supported: otc://1.0, urn:oxp:1.0, the 1.0 spec URLs, or no $schema".into())
            }
            FrontError::MissingToolId => Some("send {\"request\": {\"tool_id\": \"Toolkit.Name@1.0.0\", ...}}".into()),
            other => Some(other.to_string()),
        }
    }

    /// The error as a response: the only place statuses and bodies are chosen.
    pub fn to_reply(&self) -> Reply {
        let status = self.status();
        let message = self.message();
        let body = match self {
            FrontError::InvalidInput(errors) => serde_json::to_vec(&ValidationErrorBody {
                schema: SCHEMA,
                message: &message,
                parameter_errors: errors,
            }),
            FrontError::UpstreamRefused { body, .. } => {
                let mut body = body.clone();
                if let Value::Object(obj) = &mut body {
                    obj.insert("$schema".into(), Value::String(SCHEMA.into()));
                    obj.entry("message").or_insert_with(|| Value::String(message.clone()));
                }
                serde_json::to_vec(&body)
            }
            _ => serde_json::to_vec(&ServerErrorBody {
                schema: SCHEMA,
                message: &message,
                developer_message: self.developer_message().as_deref(),
                missing_requirements: None,
            }),
        };
        let mut headers = Vec::new();
        if let FrontError::MethodNotAllowed { allow } = self {
            headers.push(("allow", (*allow).to_owned()));
        }
        Reply {
            status,
            headers,
            // Serialising these plain structs cannot fail.
            body: Bytes::from(body.unwrap_or_default()),
            close: matches!(self, FrontError::BodyTooLarge { .. } | FrontError::BodyUnreadable(_)),
        }
    }
}
