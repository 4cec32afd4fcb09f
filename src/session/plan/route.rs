//! Placement by device: which lane (and so which ring) reads or writes
//! each file, and the routing of a file's frames to that lane's streams.
//!
//! A receiver whose files go to several devices (several filesystems
//! mounted under its root: RAID members, NVMe drives, targets) gives each
//! device to one class of its lanes, and each class its own streams. It
//! tells the sender, once, before the data ([`Message::Placement`]): each
//! stream's class and each entry's. The sender puts a file's frames on the
//! streams of its class, and its lanes take the pieces of the classes
//! their streams serve, so each device is written by its own ring.
//!
//! A receiver that gave no placement (one device, one lane) leaves the
//! sender free to place by its own devices ([`for_source`]): the sources'
//! devices get classes of the sender's lanes in the same way, so each
//! source device is read by its own ring. The receiver's devices come
//! first: where both have several, the receiver's placement rules.
//!
//! A route is a hint, never a rule: a frame that arrives on any stream is
//! received as always (a lost stream's frames go wherever a stream lives),
//! and a file that lies is only slower.

use std::collections::HashMap;

use crate::datapath::beneath::Root;
use crate::protocol::control::{ErrorCode, Message, LIST_PART_ITEMS_MAX};

use crate::session::link::lanes::{Lane, LANES_MAX};
use crate::session::SessionError;

/// A placement as it comes on the wire: each stream's class, and runs of
/// entries' classes (first entry, class).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) streams: Vec<u16>,
    pub(crate) runs: Vec<(u32, u16)>,
}

impl Placement {
    pub(crate) fn new(streams: Vec<u16>, runs: Vec<(u32, u16)>) -> Placement {
        Placement { streams, runs }
    }
}

/// Each stream's class and each entry's, for the sender; no classes (one
/// class, [`Route::none`]) when the receiver writes to one device, runs a
/// single lane, or said nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Route {
    /// By session stream number.
    streams: Vec<u16>,
    /// By entry.
    entries: Vec<u16>,
    classes: usize,
}

impl Route {
    /// No routing: every frame on any stream.
    pub(crate) fn none() -> Route {
        Route::default()
    }

    /// Classes (1 without routing).
    pub(crate) fn classes(&self) -> usize {
        self.classes.max(1)
    }

    pub(crate) fn is_routed(&self) -> bool {
        self.classes > 1
    }

    /// The class of entry `entry`.
    pub(crate) fn of_entry(&self, entry: usize) -> usize {
        self.entries.get(entry).map_or(0, |&c| usize::from(c))
    }

    /// The class of stream `stream` (a session number).
    pub(crate) fn of_stream(&self, stream: u32) -> usize {
        self.streams
            .get(stream as usize)
            .map_or(0, |&c| usize::from(c))
    }

    /// Which classes `lane` serves (the classes of its streams).
    pub(crate) fn served_by(&self, lane: &Lane) -> Vec<bool> {
        let mut serves = vec![!self.is_routed(); self.classes()];
        for &s in &lane.streams {
            serves[self.of_stream(s)] = true;
        }
        serves
    }

    /// A sender's route from what its receiver said, for `entries` entries
    /// and `streams` streams; a placement that does not fit the session
    /// (another stream count, an entry past the manifest, a class above
    /// every stream's, runs out of order) is the receiver's error. (A
    /// class between with no stream is nobody's to serve: anyone's.)
    pub(crate) fn from_placement(
        Placement { streams, runs }: Placement,
        entries: usize,
        stream_count: u16,
    ) -> Result<Route, SessionError> {
        if streams.is_empty() && runs.is_empty() {
            return Ok(Route::none());
        }
        let bad = |why: &str| {
            SessionError::local(
                ErrorCode::Malformed,
                format!("the receiver's placement {why}"),
            )
        };
        if streams.len() != usize::from(stream_count) {
            return Err(bad("names another number of streams"));
        }
        let classes = streams
            .iter()
            .map(|&c| usize::from(c) + 1)
            .max()
            .unwrap_or(1);
        if classes > usize::from(LANES_MAX) {
            return Err(bad("has more classes than lanes"));
        }
        let mut per_entry = vec![0u16; entries];
        for (k, &(first, class)) in runs.iter().enumerate() {
            let end = runs.get(k + 1).map_or(entries, |r| r.0 as usize);
            if first as usize >= entries || usize::from(class) >= classes {
                return Err(bad("names an entry or class the session does not have"));
            }
            if end <= first as usize {
                return Err(bad("has its runs out of order"));
            }
            per_entry[first as usize..end.min(entries)].fill(class);
        }
        Ok(Route {
            streams,
            entries: per_entry,
            classes,
        })
    }

    /// The message that tells the sender (empty without routing; too many
    /// runs for one message: no routing either).
    pub(crate) fn message(&self) -> Message {
        let mut runs: Vec<(u32, u16)> = Vec::new();
        if self.is_routed() {
            for (i, &c) in self.entries.iter().enumerate() {
                if runs.last().is_none_or(|r| r.1 != c) {
                    runs.push((i as u32, c));
                }
            }
        }
        if !self.is_routed() || runs.len() > LIST_PART_ITEMS_MAX as usize {
            return Message::Placement {
                streams: Vec::new(),
                entries: Vec::new(),
            };
        }
        Message::Placement {
            streams: self.streams.clone(),
            entries: runs,
        }
    }
}

/// A receiver's route for its `lanes` (streams placed as planned, not by
/// the core they arrive on) and the files it writes, each `(entry, path of
/// its directory under the root, its bytes)`: [`by_device`] of the devices
/// those directories sit on. `tick` runs every so many directories looked at (a
/// heartbeat while a large tree is placed).
pub(crate) fn plan_for<'f>(
    root: &Root,
    lanes: &[Lane],
    entries: usize,
    files: impl Iterator<Item = (usize, &'f str, u64)>,
    tick: &mut dyn FnMut(),
) -> Route {
    if lanes.len() < 2 {
        return Route::none();
    }
    // Each directory looked at once.
    let mut device_of_dir: HashMap<&str, u64> = HashMap::new();
    let mut looked = 0usize;
    let devices = files.map(|(entry, dir, bytes)| {
        let device = *device_of_dir.entry(dir).or_insert_with(|| {
            if looked.is_multiple_of(1024) {
                tick();
            }
            looked += 1;
            dir_device(root, dir)
        });
        (entry, device, bytes)
    });
    by_device(lanes, entries, devices)
}

/// What a sender's route is planned for: how many entries the manifest
/// has, and how many data streams the session.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) entries: usize,
    pub(crate) streams: u16,
}

/// A sender's route: its receiver's placement when it gave one (the
/// receiver's devices are written by their own rings; see
/// [`Route::from_placement`]), else its own `files`' devices, each
/// `(entry, st_dev of its source, its bytes)`, read each by its own lanes
/// ([`by_device`] over this side's `lanes`).
pub(crate) fn for_source(
    placement: Placement,
    shape: Shape,
    lanes: &[Lane],
    files: impl Iterator<Item = (usize, u64, u64)>,
) -> Result<Route, SessionError> {
    if !placement.streams.is_empty() || !placement.runs.is_empty() || lanes.len() < 2 {
        return Route::from_placement(placement, shape.entries, shape.streams);
    }
    Ok(by_device(lanes, shape.entries, files))
}

/// The route of files on devices, each `(entry, device, bytes)`: the
/// devices that hold a fair share of the bytes (see [`SHARE_MIN`]) numbered
/// in order of first appearance, device `d` to class `d mod C` and lane `k`
/// (with its streams) to class `k mod C`, `C` the fewer of lanes and such
/// devices; the files of the others go with the first. Fewer than two such
/// devices, or one lane: no routing.
fn by_device(
    lanes: &[Lane],
    entries: usize,
    files: impl Iterator<Item = (usize, u64, u64)>,
) -> Route {
    let mut devices: Vec<(u64, u64)> = Vec::new();
    let per_entry: Vec<(usize, usize)> = files
        .map(|(entry, dev, bytes)| {
            let d = devices.iter().position(|x| x.0 == dev).unwrap_or_else(|| {
                devices.push((dev, 0));
                devices.len() - 1
            });
            devices[d].1 += bytes;
            (entry, d)
        })
        .collect();
    let total: u64 = devices.iter().map(|d| d.1).sum();
    let fair = |bytes: u64| bytes.saturating_mul(SHARE_MIN * lanes.len() as u64) >= total;
    // Each device's number among those of a fair share (others: the first).
    let mut rank = vec![0usize; devices.len()];
    let mut fairs = 0;
    for (d, &(_, bytes)) in devices.iter().enumerate() {
        if fair(bytes) {
            rank[d] = fairs;
            fairs += 1;
        }
    }
    let c = lanes.len().min(fairs);
    if c < 2 {
        return Route::none();
    }
    let mut entry_class = vec![0u16; entries];
    for (entry, d) in per_entry {
        entry_class[entry] = (rank[d] % c) as u16;
    }
    let stream_count = lanes.iter().map(|l| l.streams.len()).sum();
    let mut streams = vec![0u16; stream_count];
    for l in lanes {
        for &s in &l.streams {
            streams[s as usize] = (l.index % c) as u16;
        }
    }
    Route {
        streams,
        entries: entry_class,
        classes: c,
    }
}

/// A device is driven by its own lanes when it holds at least
/// 1 / (`SHARE_MIN` x lanes) of the bytes to move: a device with a few small
/// files would otherwise hold a lane, and its streams, idle for the whole
/// transfer while the others move everything.
const SHARE_MIN: u64 = 4;

/// The device a directory under the root sits on (0 if it cannot be
/// looked at: it then shares a class with others so placed).
fn dir_device(root: &Root, dir: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let rel = if dir.is_empty() { "." } else { dir };
    root.symlink_metadata(rel).map_or(0, |m| m.dev())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placement_round_trips_through_its_message_and_lies_are_refused() {
        let route = Route {
            streams: vec![0, 1, 0, 1],
            entries: vec![0, 0, 1, 1, 1, 0],
            classes: 2,
        };
        let Message::Placement { streams, entries } = route.message() else {
            panic!("a placement")
        };
        assert_eq!(entries, vec![(0, 0), (2, 1), (5, 0)]);
        let back =
            Route::from_placement(Placement::new(streams.clone(), entries.clone()), 6, 4).unwrap();
        assert_eq!(back, route);
        assert_eq!(back.of_entry(3), 1);
        assert_eq!(back.of_stream(2), 0);
        let lane = Lane {
            index: 1,
            streams: vec![1, 3],
            cpu: None,
        };
        assert_eq!(back.served_by(&lane), vec![false, true]);
        // Another stream count, an entry past the manifest, a class with
        // no stream.
        assert!(
            Route::from_placement(Placement::new(streams.clone(), entries.clone()), 6, 3).is_err()
        );
        assert!(
            Route::from_placement(Placement::new(streams.clone(), vec![(6, 0)]), 6, 4).is_err()
        );
        assert!(Route::from_placement(Placement::new(streams, vec![(0, 2)]), 6, 4).is_err());
        let none = Route::from_placement(Placement::default(), 6, 4).unwrap();
        assert!(!none.is_routed());
        assert_eq!(none.served_by(&lane), vec![true]);
        assert_eq!(
            Route::none().message(),
            Message::Placement {
                streams: vec![],
                entries: vec![]
            }
        );
    }

    #[test]
    fn one_device_or_one_lane_is_not_routed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let root = Root::open(dir.path()).unwrap();
        let lanes = crate::session::link::lanes::place(2, 4, &[], &[]);
        let files = || [(0, "", 10), (1, "a", 10)].into_iter();
        assert!(!plan_for(&root, &lanes, 2, files(), &mut || {}).is_routed());
        assert!(!plan_for(&root, &lanes[..1], 2, files(), &mut || {}).is_routed());
    }

    #[test]
    fn a_sender_places_by_its_own_devices_only_when_its_receiver_did_not() {
        let lanes = crate::session::link::lanes::place(2, 4, &[], &[]);
        // Entries 0 and 2 on device 7, 1 on device 9, 3 not a file.
        let files = || [(0, 7u64, 100), (1, 9, 100), (2, 7, 100)].into_iter();
        let shape = Shape {
            entries: 4,
            streams: 4,
        };
        let own = for_source(Placement::default(), shape, &lanes, files()).unwrap();
        assert!(own.is_routed());
        assert_eq!(own.classes(), 2);
        assert_eq!(own.of_entry(0), own.of_entry(2));
        assert_ne!(own.of_entry(0), own.of_entry(1));
        // Each lane's streams carry its class, and each lane serves one.
        for l in &lanes {
            let serves = own.served_by(l);
            assert_eq!(serves.iter().filter(|&&s| s).count(), 1, "{serves:?}");
            assert!(l.streams.iter().all(|&s| own.of_stream(s) == l.index % 2));
        }
        // One lane, or one device: no routing.
        assert!(
            !for_source(Placement::default(), shape, &lanes[..1], files())
                .unwrap()
                .is_routed()
        );
        let one = [(0, 7u64, 100), (2, 7, 100)].into_iter();
        assert!(!for_source(Placement::default(), shape, &lanes, one)
            .unwrap()
            .is_routed());
        // A device with a small share of the bytes (below 1/8 with two
        // lanes) gets no lane of its own: its files go with the first.
        let small = || [(0, 7u64, 1000), (1, 9, 100), (2, 5, 1000)].into_iter();
        let r = for_source(Placement::default(), shape, &lanes, small()).unwrap();
        assert!(r.is_routed());
        assert_eq!((r.of_entry(0), r.of_entry(1), r.of_entry(2)), (0, 0, 1));
        let lopsided = [(0, 7u64, 1000), (1, 9, 100)].into_iter();
        assert!(!for_source(Placement::default(), shape, &lanes, lopsided)
            .unwrap()
            .is_routed());
        // The receiver's placement rules, and is checked as ever.
        let theirs = Placement::new(vec![1, 0, 1, 0], vec![(0, 1), (1, 0)]);
        let r = for_source(theirs, shape, &lanes, files()).unwrap();
        assert_eq!((r.of_entry(0), r.of_entry(1), r.of_stream(0)), (1, 0, 1));
        assert!(for_source(Placement::new(vec![0, 1], vec![]), shape, &lanes, files()).is_err());
    }
}
