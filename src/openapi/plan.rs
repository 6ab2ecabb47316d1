//! The plan of an operation's calls, kept from the document with its tool:
//! where each parameter goes and how it is written, the body's shape, the
//! credentials the call carries. `tools.rs` makes it; `request.rs` follows
//! it for every call.

use http::Method;

use crate::config::SecuritySource;

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Location {
    /// A segment of the path.
    Path,
    /// The query string.
    Query,
    /// A request header.
    Header,
    /// The `Cookie` header.
    Cookie,
}

/// How a parameter's value is written (OpenAPI's `style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// `a,b` (path and header default).
    Simple,
    /// `.a.b` in a path.
    Label,
    /// `;name=a` in a path.
    Matrix,
    /// `name=a&name=b` (query and cookie default).
    Form,
    /// `name=a%20b`.
    SpaceDelimited,
    /// `name=a|b`.
    PipeDelimited,
    /// `name[key]=value`.
    DeepObject,
}

/// One parameter of an operation.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    /// Its name, which is also the input property.
    pub(crate) name: String,
    /// Where it goes.
    pub(crate) location: Location,
    /// How it is written.
    pub(crate) style: Style,
    /// `explode`.
    pub(crate) explode: bool,
    /// Written as JSON text (a parameter with `content: application/json`).
    pub(crate) json: bool,
    /// A path parameter declared `allowReserved`: its `/` are sent as they
    /// are (a value of several segments), none of which may be a dot
    /// segment (`url_path.rs`).
    pub(crate) reserved: bool,
}

/// How the input becomes the request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BodyShape {
    /// The body object's properties are top-level inputs: every input that
    /// is not a parameter goes into the body.
    Merged,
    /// The input `body` is the whole body.
    Property,
}

/// An operation's request body.
#[derive(Debug, Clone)]
pub(crate) struct Body {
    /// The media type sent as `Content-Type`.
    pub(crate) media_type: String,
    /// JSON (else text: the input's string as it is).
    pub(crate) json: bool,
    /// Where it comes from in the input.
    pub(crate) shape: BodyShape,
    /// Sent even when the input has nothing for it.
    pub(crate) required: bool,
}

/// Where an API key goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyLocation {
    /// A header of that name.
    Header,
    /// A query parameter of that name.
    Query,
    /// A cookie of that name.
    Cookie,
}

/// How a security scheme presents its credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SchemeKind {
    /// `apiKey`: the value under `name`, in a header, the query or a cookie.
    ApiKey {
        /// Where.
        location: KeyLocation,
        /// The header, parameter or cookie name.
        name: String,
    },
    /// `http` `bearer`, `oauth2`, `openIdConnect`: `Authorization: Bearer`.
    Bearer,
    /// `http` `basic`: `Authorization: Basic`, from a `user:password` value.
    Basic,
}

/// One credential a call carries: how, and from which injected value.
#[derive(Debug, Clone)]
pub(crate) struct Credential {
    /// The scheme's name in the document, for messages.
    pub(crate) scheme: String,
    /// How it is presented.
    pub(crate) kind: SchemeKind,
    /// The `[secrets]` id or provider whose value it is.
    pub(crate) source: SecuritySource,
}

/// One piece of a path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PathPart {
    /// Text written as it is.
    Literal(String),
    /// The path parameter of that name.
    Param(String),
}

/// The plan of one operation's calls.
#[derive(Debug, Clone)]
pub(crate) struct Operation {
    /// `GET /books/{id}`: for messages, and the tool's `upstream_id`.
    pub(crate) label: String,
    /// The method.
    pub(crate) method: Method,
    /// The path template, in pieces.
    pub(crate) path: Vec<PathPart>,
    /// Its parameters.
    pub(crate) params: Vec<Param>,
    /// Its body, if it takes one the gateway can send.
    pub(crate) body: Option<Body>,
    /// The credentials it carries (one security requirement's schemes).
    pub(crate) credentials: Vec<Credential>,
    /// The media types of its successful answers, for `Accept`.
    pub(crate) accept: Option<String>,
}
