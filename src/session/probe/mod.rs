//! The network tests against a daemon: `bench --net` (`bench_net`) and
//! its UDP test (`udp`, its flows in `udp_flows`, the daemon's half in
//! `udp_daemon`), both ends of each. Uses `client`'s session setup and the
//! rooms below.

pub mod bench_net;
pub mod udp;
pub(crate) mod udp_daemon;
pub(crate) mod udp_flows;
