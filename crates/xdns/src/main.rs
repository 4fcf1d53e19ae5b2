mod xdp;
fn main() {}
