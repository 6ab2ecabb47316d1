//! OpenAPI documents as tool servers: every operation of a REST API's
//! OpenAPI 3.0 or 3.1 document is a tool, and a call to it is an HTTP
//! request built from the tool's input.
//!
//! One concern per file: `document.rs` reads a document (JSON or YAML, which
//! OpenAPI); `schema.rs` resolves `$ref`s and turns schemas into
//! self-contained JSON Schema 2020-12; `tools.rs` makes each operation a
//! tool definition and the plan of its calls (`plan.rs`), with the
//! credentials its security asks for (`security.rs`); `request.rs` builds a call's
//! request from the plan and the input; `response.rs` reads the answer as
//! the tool's outcome. `upstream/openapi.rs` fetches documents and sends
//! calls with them.

mod document;
mod plan;
mod request;
mod response;
mod schema;
mod security;
mod tools;

pub(crate) use plan::Operation;
pub(crate) use request::prepare;
pub(crate) use response::outcome;
pub(crate) use tools::{import, ImportSettings};
