//! Compile a lookup result into an [`xdns_wire::Body`] (owner: engine).
