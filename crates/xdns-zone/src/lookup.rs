//! RFC 1034 §4.3.2 lookup (owner: engine).
