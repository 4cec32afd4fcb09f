//! The network's checks: socket buffer limits and TCP autotuning, the
//! backlog, congestion control, the qdisc, MTU probing and the route's MTU.

use super::profile::{self, size, Plan, CONGESTION_GOOD, SRC_ESNET_LINUX};
use super::{Check, Scene};
use crate::datapath::host;

pub(super) fn socket_max(p: &Plan, key: &str, what: &str) -> Check {
    let rec = p.core_buf_max;
    let src = format!("{SRC_ESNET_LINUX}; urmove: 2 x BDP rounded up");
    match host::sysctl_u64(key) {
        Ok(cur) => Check::new(
            key,
            cur.to_string(),
            format!(">= {rec}"),
            cur >= rec,
            format!(
                "ceiling on {what} a program sets itself: {} now; {}",
                size(cur),
                profile::core_reason(p)
            ),
            &src,
        ),
        Err(e) => Check::unseen(key, format!(">= {rec}"), e, &src),
    }
}

pub(super) fn autotuning(p: &Plan, key: &str, low: [u64; 2], side: &str) -> Check {
    let src = format!("{SRC_ESNET_LINUX}; urmove: one BDP per socket");
    match host::sysctl_triple(key) {
        Ok(cur) => {
            let rec = profile::autotuning_triple(Some(cur), low, p.tcp_buf_max);
            Check::new(
                key,
                format!("{} {} {}", cur[0], cur[1], cur[2]),
                format!("{} {} {}", rec[0], rec[1], rec[2]),
                cur == rec,
                format!(
                    "{side} autotuning stops at the 3rd value: {} lets one stream reach {} at {}; one BDP ({}) rounded up is {}",
                    size(cur[2]),
                    profile::window_rate(cur[2], p.rtt),
                    profile::ms(p.rtt),
                    size(p.bdp_bytes),
                    size(p.tcp_buf_max)
                ),
                &src,
            )
        }
        Err(e) => Check::unseen(
            key,
            format!("{} {} {}", low[0], low[1], p.tcp_buf_max),
            e,
            &src,
        ),
    }
}

pub(super) fn backlog(p: &Plan) -> Check {
    let key = "net.core.netdev_max_backlog";
    let rec = p.netdev_max_backlog;
    let src = format!("{SRC_ESNET_LINUX} (30000 at 10G); urmove: scaled with link speed");
    match host::sysctl_u64(key) {
        Ok(cur) => Check::new(
            key,
            cur.to_string(),
            format!(">= {rec}"),
            cur >= rec,
            format!(
                "packets queued per CPU between the NIC and TCP; a burst at {} overflows a short queue (drops: 2nd column of /proc/net/softnet_stat)",
                p.link.name
            ),
            &src,
        ),
        Err(e) => Check::unseen(key, format!(">= {rec}"), e, &src),
    }
}

pub(super) fn congestion(p: &Plan) -> [Check; 2] {
    let key = "net.ipv4.tcp_congestion_control";
    let rec = "bbr or htcp";
    let cc = match host::sysctl(key) {
        Ok(cur) => {
            let ok = CONGESTION_GOOD.contains(&cur.as_str());
            let why = if ok {
                format!("{cur} recovers from a loss on a long fast path within seconds")
            } else {
                format!(
                    "{cur} halves its window on a loss and regrows it slowly: minutes at {}; use bbr (or htcp)",
                    p.path()
                )
            };
            Check::new(key, cur, rec, ok, why, SRC_ESNET_LINUX)
        }
        Err(e) => Check::unseen(key, rec, e, SRC_ESNET_LINUX),
    };
    let key = "net.ipv4.tcp_available_congestion_control";
    let rec = "lists bbr or htcp";
    let avail = match host::sysctl(key) {
        Ok(cur) => {
            let have: Vec<&str> = cur
                .split(' ')
                .filter(|c| CONGESTION_GOOD.contains(c))
                .collect();
            let why = if have.is_empty() {
                "neither is loaded: modprobe tcp_bbr (or tcp_htcp) and list it in /etc/modules-load.d/"
                    .to_string()
            } else {
                format!("{} can be chosen", have.join(" and "))
            };
            Check::new(
                key,
                cur.clone(),
                rec,
                !have.is_empty(),
                why,
                SRC_ESNET_LINUX,
            )
        }
        Err(e) => Check::unseen(key, rec, e, SRC_ESNET_LINUX),
    };
    [cc, avail]
}

pub(super) fn qdisc() -> Check {
    let key = "net.core.default_qdisc";
    match host::sysctl(key) {
        Ok(cur) => Check::new(
            key,
            cur.clone(),
            "fq",
            cur == "fq",
            "fq paces each TCP flow so parallel streams do not burst into switch buffers; only qdiscs created later pick it up",
            SRC_ESNET_LINUX,
        ),
        Err(e) => Check::unseen(key, "fq", e, SRC_ESNET_LINUX),
    }
}

pub(super) fn mtu_probing() -> Check {
    let key = "net.ipv4.tcp_mtu_probing";
    let src = format!("{SRC_ESNET_LINUX}; {}", profile::SRC_KERNEL_IP_SYSCTL);
    match host::sysctl_u64(key) {
        Ok(cur) => Check::new(
            key,
            cur.to_string(),
            ">= 1",
            cur >= 1,
            "finds a working segment size when a jumbo-frame path drops ICMP 'fragmentation needed' (a black hole)",
            &src,
        ),
        Err(e) => Check::unseen(key, ">= 1", e, &src),
    }
}

pub(super) fn route_mtu(s: &Scene) -> Check {
    let name = "route.mtu";
    let rec = format!(">= {}", profile::MTU_JUMBO);
    let src = format!("{SRC_ESNET_LINUX} (jumbo frames, MTU 9000)");
    let r = match &s.route {
        Ok(r) => r,
        Err(e) => return Check::unseen(name, rec, e, &src),
    };
    let Some(dev_mtu) = host::dev_mtu(&r.dev) else {
        return Check::unseen(
            name,
            rec,
            format!("/sys/class/net/{}/mtu is not readable", r.dev),
            &src,
        );
    };
    let mtu = r.route_mtu.map_or(dev_mtu, |m| m.min(dev_mtu));
    let ok = mtu >= profile::MTU_JUMBO;
    let why = if ok {
        format!(
            "jumbo frames on {}; every hop must carry them too (ping -M do -s 8972 PEER)",
            r.dev
        )
    } else {
        format!(
            "{mtu}-byte frames take about {:.0}x the packets of 9000 at {}; set mtu 9000 on {} and on every hop of the path",
            f64::from(profile::MTU_JUMBO) / f64::from(mtu.max(1)),
            s.plan.link.name,
            r.dev
        )
    };
    Check::new(
        name,
        format!("{mtu} ({}, {})", r.dev, r.what),
        rec,
        ok,
        why,
        &src,
    )
}
