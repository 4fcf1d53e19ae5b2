//! XDP fast path (owner: xdp work; issue 3).
