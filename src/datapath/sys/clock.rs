//! Clocks: the coarse real-time clock the kernel stamps inodes with, the
//! local wall-clock time for interval lines and titles, and a thread's CPU
//! time.

use std::mem::MaybeUninit;

/// The coarse real-time clock (what the kernel stamps an inode's times
/// with when nobody looked at them since), in nanoseconds since the epoch.
pub fn coarse_now_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec the call writes.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// The local wall-clock time as (hours, minutes, seconds), for interval lines.
pub fn local_hms() -> (u32, u32, u32) {
    match local_tm() {
        Ok(tm) => (tm.tm_hour as u32, tm.tm_min as u32, tm.tm_sec as u32),
        Err(now) => {
            let s = (now.max(0) as u64 % 86_400) as u32;
            (s / 3600, (s / 60) % 60, s % 60)
        }
    }
}

/// The local date and time as `YYYY-MM-DD HH:MM` (seconds since 1970
/// when the local time is unknown), for titles.
pub fn local_date_time() -> String {
    match local_tm() {
        Ok(tm) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min
        ),
        Err(now) => format!("{} s since 1970 UTC", now.max(0)),
    }
}

/// The broken-down local time now, or the bare clock if that fails.
fn local_tm() -> Result<libc::tm, libc::time_t> {
    // SAFETY: time(NULL) reads the clock and writes nothing of ours.
    let now = unsafe { libc::time(std::ptr::null_mut()) };
    let mut tm = MaybeUninit::<libc::tm>::zeroed();
    // SAFETY: localtime_r writes only into `tm`, a valid buffer that outlives
    // the call; `now` is a valid time_t.
    let ok = unsafe { !libc::localtime_r(&now, tm.as_mut_ptr()).is_null() };
    if !ok {
        return Err(now);
    }
    // SAFETY: localtime_r succeeded, so `tm` is initialised (it was zeroed too).
    Ok(unsafe { tm.assume_init() })
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, owned by this
    // frame for the call.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
