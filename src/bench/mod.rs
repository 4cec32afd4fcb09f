//! L3: benchmarks. `bench --disk` drives the data path and the coordinator
//! directly; it never touches `cli` or `session`.

pub mod disk;
mod phase;
pub mod report;
pub mod sweep;
mod target;

pub use disk::{run_disk_bench, DiskBenchConfig, Mode, Observer, SizeRule};
pub use report::{DiskReport, IntervalLine, ModeResult};
