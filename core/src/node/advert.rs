//! What the node advertises: its fixed registrations (tags, attributes) once it
//! joins, and its live `res:any` line (free slots, load, free memory), replaced
//! whenever it changes enough: the new line, with a higher `gen`, is registered,
//! and the line before the old one withdrawn (readers keep a node's newest line;
//! withdrawing the old line at once would leave a moment in which a query finds
//! no line of the node at all). Changes closer together than `gap` are folded
//! into one re-advertisement at the end of the gap.

use std::time::{Duration, Instant};

use super::{DaemonNode, Timer};
use crate::job::{ANY_NAME, Resources};
use crate::overlay::OverlayCommand;

/// A load change smaller than this (thousandths) is not worth a new line.
const LOAD_STEP: u32 = 250;

/// The live part of the advertisement.
#[derive(Debug)]
pub(super) struct Advert {
    base: Resources,
    gap: Duration,
    generation: u64,
    load_milli: Option<u32>,
    mem_free_mb: Option<u64>,
    /// The `res:any` value registered now, and what it said (its `gen` aside).
    registered: Option<(String, Resources)>,
    /// The line it replaced, still registered until the next one replaces it.
    previous: Option<String>,
    /// When it was registered.
    last: Option<Instant>,
}

impl Advert {
    pub(super) fn new(base: Resources, gap: Duration, generation_base: u64) -> Self {
        Advert {
            base,
            gap,
            generation: generation_base,
            load_milli: None,
            mem_free_mb: None,
            registered: None,
            previous: None,
            last: None,
        }
    }

    /// The resources with `free` slots and the latest host figures.
    pub(super) fn current(&self, free: u32) -> Resources {
        Resources {
            slots: free,
            slots_total: self.base.slots,
            load_milli: self.load_milli,
            mem_free_mb: self.mem_free_mb,
            generation: self.generation,
            ..self.base.clone()
        }
    }

    /// New host figures; whether they moved enough to advertise.
    pub(super) fn host_stats(&mut self, load_milli: u32, mem_free_mb: u64) -> bool {
        let load_moved = self.load_milli.is_none_or(|l| l.abs_diff(load_milli) >= LOAD_STEP);
        let mem_moved = self.mem_free_mb.is_none_or(|m| m.abs_diff(mem_free_mb) * 10 >= m.max(1));
        if load_moved {
            self.load_milli = Some(load_milli);
        }
        if mem_moved {
            self.mem_free_mb = Some(mem_free_mb);
        }
        load_moved || mem_moved
    }
}

impl DaemonNode {
    /// Joined (again): every registration, the live line included.
    pub(super) fn advertise_all(&mut self, now: Instant) {
        let res = self.advert.current(self.exec.free_slots());
        for (name, value) in res.registrations(self.addr).into_iter().filter(|(n, _)| n != ANY_NAME) {
            let ttl = self.resource_ttl;
            self.overlay(now, OverlayCommand::Register { name, value, ttl });
        }
        self.readvertise(now);
    }

    /// Free slots or host figures changed: re-advertise now, or at the end of the gap.
    pub(super) fn resources_changed(&mut self, now: Instant) {
        if self.advert.registered.is_none() {
            return; // not joined yet: the first line goes out when it joins
        }
        let due = self.advert.last.map_or(now, |t| t + self.advert.gap);
        if due <= now {
            self.readvertise(now);
        } else if self.timers.get(Timer::Advert).is_none() {
            self.timers.set(Timer::Advert, due);
        }
    }

    /// Replaces the `res:any` line with the current one.
    pub(super) fn readvertise(&mut self, now: Instant) {
        if self.left || !self.overlay.is_joined() {
            return;
        }
        self.timers.clear(Timer::Advert);
        let says = Resources { generation: 0, ..self.advert.current(self.exec.free_slots()) };
        if self.advert.registered.as_ref().is_some_and(|(_, r)| *r == says) {
            return;
        }
        self.advert.generation += 1;
        let value = Resources { generation: self.advert.generation, ..says.clone() }.any_value(self.addr);
        let ttl = self.resource_ttl;
        self.overlay(now, OverlayCommand::Register { name: ANY_NAME.to_owned(), value: value.clone(), ttl });
        if let Some(old) = self.advert.previous.take() {
            self.overlay(now, OverlayCommand::Unregister { name: ANY_NAME.to_owned(), value: old });
        }
        self.advert.previous = self.advert.registered.take().map(|(v, _)| v);
        self.advert.registered = Some((value, says));
        self.advert.last = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_figures_are_worth_a_line_only_when_they_move_enough() {
        let mut a = Advert::new(Resources { slots: 4, ..Resources::default() }, Duration::from_millis(250), 100);
        assert!(a.host_stats(500, 10_000), "the first figures always count");
        assert!(!a.host_stats(700, 9_500), "0.2 of load and 5% of memory are noise");
        assert!(a.host_stats(750, 9_500), "0.25 of load is not");
        assert!(a.host_stats(760, 8_900), "10% of memory is not");
        let r = a.current(3);
        assert_eq!((r.slots, r.slots_total, r.load_milli, r.mem_free_mb), (3, 4, Some(750), Some(8_900)));
        assert_eq!(r.generation, 100, "gen moves only when a line is registered");
    }
}
