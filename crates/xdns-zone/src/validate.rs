//! Zone validation (owner: loader): one SOA at the apex, apex NS present, CNAME beside other
//! data rejected, out-of-zone records reported.
