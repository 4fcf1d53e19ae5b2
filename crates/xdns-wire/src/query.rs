//! (owner: engine)
pub struct Query;
pub enum ParseError {}
