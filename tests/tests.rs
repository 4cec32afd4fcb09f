//! urmove's integration tests: one binary, built once (as ripgrep does).

mod util;

mod admin;
mod alloc_count;
mod attack2;
mod attack3;
mod attack4;
mod budgets;
mod cli_errors;
mod datapath;
mod disk;
mod disk_devices;
mod docs;
mod faults;
mod fidelity;
mod follow;
mod hostile;
mod lanes;
mod limits;
mod linters;
mod names;
mod net;
mod placement;
mod plot;
mod protocol_io;
mod sealed;
mod service;
mod shards;
mod sparse;
mod transfer;
mod trust;
mod tune;
mod udp;
mod ux;
mod verified;
mod wan;
