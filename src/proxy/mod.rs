//! The data plane on pingora.
//!
//! Routing depends on the body (the tool id is inside it), and pingora's
//! proxy path cannot re-send a consumed body over 64 KB (its retry buffer
//! stops there: a body read in `request_filter` is lost past it, measured
//! with pingora 0.9.1). So the gateway is a pingora
//! application, not a `ProxyHttp`: pingora accepts connections and runs the
//! workers; each request is answered here, its whole body read (up to
//! `max_body_bytes`) and the call made with the gateway's own pooled client.
//! (Behind `ProxyHttp`, pingora also boxed a proxy future of tens of KB per
//! request that this gateway never used, a large share of a call's
//! instructions: benches/HISTORY.md, "Figures behind the code".)
//!
//! A connection starts in the lean reader (`lean.rs`, [`DataPlane`]), which
//! reads plain tool calls itself (their heads parsed by `lean_head.rs`); any
//! other request goes, one at a time, to pingora's HTTP session
//! (`pingora_path.rs`), whose heads pass the framing checks of `head.rs`.
//! Whichever reader read it, a request then passes one front door
//! (`front_door.rs`, [`FrontDoor`]): the browser policy, authentication,
//! the body, admission, dispatch and the metrics, once for every route.
//! `send.rs` writes replies and event streams; `open_connections.rs`
//! bounds the connections.

mod front_door;
mod head;
mod lean;
mod lean_head;
mod open_connections;
mod pingora_path;
mod send;

pub use front_door::FrontDoor;
pub use lean::DataPlane;
