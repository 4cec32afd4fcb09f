//! The cores' checks: their frequency governor, and the NIC's queues and
//! interrupts spread over the cores of its node.

use super::profile::{Plan, SRC_ESNET_100G};
use super::{Check, Scene};
use crate::datapath::host;

pub(super) fn governor(p: &Plan) -> Check {
    let name = "cpu.scaling_governor";
    let src = format!("{SRC_ESNET_100G} (CPU governor)");
    let govs = host::governors();
    if govs.is_empty() {
        return Check::unseen(
            name,
            "performance",
            "not visible: no /sys/devices/system/cpu/cpu*/cpufreq (a VM, or the firmware sets the clock)",
            &src,
        );
    }
    let mut counts = std::collections::BTreeMap::new();
    for (_, g) in &govs {
        *counts.entry(g.as_str()).or_insert(0usize) += 1;
    }
    let current = counts
        .iter()
        .map(|(g, n)| format!("{g} on {n} of {} CPUs", govs.len()))
        .collect::<Vec<_>>()
        .join(", ");
    let ok = counts.len() == 1 && counts.contains_key("performance");
    Check::new(
        name,
        current,
        "performance",
        ok,
        format!(
            "a power-saving governor drops the clock between bursts and reacts late to the softirq load of {}; cpupower frequency-set -g performance",
            p.link.name
        ),
        &src,
    )
}

pub(super) fn nic_queues(s: &Scene) -> Check {
    let name = "nic.queues";
    let want = s.plan.nic_queues_min.min(s.cpus).max(1);
    let rec = format!(">= {want} rx");
    let src = format!("urmove: a net worker per NIC queue; {SRC_ESNET_100G}");
    let r = match &s.route {
        Ok(r) => r,
        Err(e) => return Check::unseen(name, rec, e, &src),
    };
    if !host::has_device(&r.dev) {
        return Check {
            name: name.into(),
            current: Some(format!("{}: software device, no hardware queues", r.dev)),
            recommended: rec,
            ok: None,
            why: "the route leaves by a software device (loopback, veth, bridge); run tune with --peer set to the far data-transfer node".into(),
            source: src,
        };
    }
    match host::queues(&r.dev) {
        Ok((rx, tx)) => Check::new(
            name,
            format!(
                "{}: {rx} rx, {tx} tx ({})",
                r.dev,
                host::driver(&r.dev).unwrap_or_else(|| "driver unknown".into())
            ),
            rec,
            rx >= want,
            format!(
                "RSS spreads streams over queues and cores, one core's softirqs carry about 10-15 Gb/s; {} wants {}, capped at the {} CPUs here (ethtool -L {} combined {want})",
                s.plan.link.name, s.plan.nic_queues_min, s.cpus, r.dev
            ),
            &src,
        ),
        Err(e) => Check::unseen(name, rec, e, &src),
    }
}

/// `0-3,8` from a sorted list of CPUs.
fn cpu_ranges(cpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

pub(super) fn irq_affinity(s: &Scene) -> Check {
    let name = "nic.irq_affinity";
    let src = format!("{SRC_ESNET_100G} (IRQ binding); kernel docs: core-api/irq/irq-affinity.rst");
    let r = match &s.route {
        Ok(r) => r,
        Err(e) => return Check::unseen(name, "spread over cores of the NIC's node", e, &src),
    };
    let node = host::numa_node(&r.dev);
    let node_cpus = node.and_then(host::node_cpus);
    let rec = match node {
        Some(n) => format!("spread over cores of node {n}"),
        None => "spread over distinct cores".into(),
    };
    let irqs = host::irqs(&r.dev);
    if irqs.is_empty() {
        return Check::unseen(
            name,
            rec,
            format!(
                "not visible: no IRQs of {} in /proc/interrupts or its PCI function's msi_irqs (a software device?)",
                r.dev
            ),
            &src,
        );
    }
    let mut all: Vec<u32> = irqs.iter().flat_map(|i| i.cpus.iter().copied()).collect();
    all.sort_unstable();
    all.dedup();
    let numbers: Vec<u32> = irqs.iter().map(|i| i.number).collect();
    let spread = irqs.len() <= 1 || all.len() > 1 || s.cpus <= 1;
    let off_node: Vec<u32> = match &node_cpus {
        Some(nc) => all.iter().copied().filter(|c| !nc.contains(c)).collect(),
        None => Vec::new(),
    };
    let ok = spread && off_node.is_empty();
    let why = if !spread {
        format!(
            "all {} IRQs land on CPU {}: one core takes every interrupt; spread them (irqbalance, or the driver's set_irq_affinity script)",
            irqs.len(),
            cpu_ranges(&all)
        )
    } else if !off_node.is_empty() {
        format!(
            "CPUs {} are off the NIC's NUMA node: packets cross the interconnect; bind IRQs and urmove to node {}",
            cpu_ranges(&off_node),
            node.unwrap_or(0)
        )
    } else {
        format!(
            "{} of {}: {}",
            irqs.len(),
            r.dev,
            irqs.iter()
                .map(|i| format!("{} {}->{}", i.number, i.name, cpu_ranges(&i.cpus)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Check::new(
        name,
        format!(
            "{} IRQs ({}) on CPUs {}",
            irqs.len(),
            cpu_ranges(&numbers),
            cpu_ranges(&all)
        ),
        rec,
        ok,
        why,
        &src,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ranges_compact() {
        assert_eq!(cpu_ranges(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpu_ranges(&[4]), "4");
        assert_eq!(cpu_ranges(&[]), "");
    }
}
