//! The network tests against a daemon: `bench --net` (`bench_net`) and
//! its UDP test (`udp`), both ends of each. Uses `client`'s session setup
//! and the rooms below.

pub mod bench_net;
pub mod udp;
