//! Recognise what a block device already holds from its first bytes, so a
//! benchmark never overwrites a filesystem, a partition table or a RAID member
//! unless told to (`--destroy`).

/// How many leading bytes `detect` looks at.
pub const HEAD_LEN: usize = 128 * 1024;

/// The kind of data found at the start of a device, if any is recognised.
pub fn detect(head: &[u8]) -> Option<&'static str> {
    let at = |off: usize, sig: &[u8]| head.get(off..off + sig.len()) == Some(sig);
    let checks: &[(usize, &[u8], &'static str)] = &[
        (0, b"XFSB", "an XFS filesystem"),
        (1080, &[0x53, 0xEF], "an ext2/3/4 filesystem"),
        (0x10040, b"_BHRfS_M", "a btrfs filesystem"),
        (1024, &[0x10, 0x20, 0xF5, 0xF2], "an f2fs filesystem"),
        (3, b"NTFS    ", "an NTFS filesystem"),
        (0, b"LUKS\xba\xbe", "a LUKS encrypted volume"),
        (0, &[0xFC, 0x4E, 0x2B, 0xA9], "an md RAID member"),
        (4096, &[0xFC, 0x4E, 0x2B, 0xA9], "an md RAID member"),
        (512, b"LABELONE", "an LVM physical volume"),
        (512, b"EFI PART", "a GPT partition table"),
        (4096, b"EFI PART", "a GPT partition table"),
        (4086, b"SWAPSPACE2", "a swap area"),
        (4086, b"SWAP-SPACE", "a swap area"),
        (0x8001, b"CD001", "an ISO 9660 filesystem"),
        (510, &[0x55, 0xAA], "a DOS partition table or boot sector"),
    ];
    checks
        .iter()
        .find(|(off, sig, _)| at(*off, sig))
        .map(|(_, _, what)| *what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_and_random_devices_are_free() {
        assert_eq!(detect(&vec![0u8; HEAD_LEN]), None);
        let noise: Vec<u8> = (0..HEAD_LEN as u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        assert_eq!(detect(&noise), None);
    }

    #[test]
    fn known_signatures() {
        let mut h = vec![0u8; HEAD_LEN];
        h[1080] = 0x53;
        h[1081] = 0xEF;
        assert_eq!(detect(&h), Some("an ext2/3/4 filesystem"));
        let mut h = vec![0u8; HEAD_LEN];
        h[..4].copy_from_slice(b"XFSB");
        assert_eq!(detect(&h), Some("an XFS filesystem"));
        let mut h = vec![0u8; HEAD_LEN];
        h[510] = 0x55;
        h[511] = 0xAA;
        assert_eq!(detect(&h), Some("a DOS partition table or boot sector"));
        h[512..520].copy_from_slice(b"EFI PART");
        assert_eq!(detect(&h), Some("a GPT partition table"));
        // A short head is not an error: only what is there is checked.
        assert_eq!(detect(&h[..100]), None);
    }
}
