//! (owner: engine)
