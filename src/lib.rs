//! otc-gateway: one URL in front of many Open Tool Calling (OTC 1.0 / OXP)
//! tool servers.
//!
//! The life of a call is in [`call`]; the data plane that carries it is in
//! [`proxy`]; the catalog it is resolved against is in [`catalog`].

pub mod admin;
pub mod allocator;
pub mod auth;
pub mod browser;
pub mod call;
pub mod catalog;
pub mod circuit;
pub mod config;
pub mod demo;
pub mod dialect;
pub mod error;
pub mod gateway;
pub mod http1;
pub mod http_client;
pub mod idempotency;
pub mod mcp;
pub mod mcp_endpoint;
pub mod metrics;
pub mod policy;
pub mod proxy;
pub mod ratelimit;
pub mod reload;
pub mod resolve;
pub mod secret;
pub mod server;
pub mod trace;
pub mod upstream;
pub mod validate;
pub mod vault;
pub mod wire;
