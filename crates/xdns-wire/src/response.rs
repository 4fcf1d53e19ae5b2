//! (owner: engine)
pub struct Limits;
pub fn assemble() {}
