//! urmove's integration tests: one binary, built once (as ripgrep does).

mod util;

mod alloc_count;
mod cli_errors;
mod datapath;
mod disk;
mod disk_devices;
mod faults;
mod hostile;
mod linters;
mod net;
mod protocol_io;
mod sealed;
mod transfer;
mod ux;
