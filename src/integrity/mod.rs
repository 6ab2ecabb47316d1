//! The integrity of tool definitions (issue 41): the scan of what a client is shown.

pub mod scan;
