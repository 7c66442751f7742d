//! Outstanding requests of an overlay node, by request id, with their deadlines.

use std::time::Instant;

use crate::machine::NodeAddr;

/// One outstanding request: where it went, until when an answer counts, and what
/// the answer is for.
#[derive(Debug)]
pub(crate) struct Pending<W> {
    pub(crate) to: NodeAddr,
    pub(crate) deadline: Instant,
    pub(crate) what: W,
}

/// Outstanding requests by request id, oldest first. A node has a handful at a
/// time, so a Vec is smaller and faster than a map.
#[derive(Debug)]
pub(crate) struct Requests<W>(Vec<(u64, Pending<W>)>);

impl<W> Default for Requests<W> {
    fn default() -> Self {
        Requests(Vec::new())
    }
}

impl<W> Requests<W> {
    pub(crate) fn insert(&mut self, id: u64, p: Pending<W>) {
        self.0.push((id, p));
    }

    pub(crate) fn get(&self, id: &u64) -> Option<&Pending<W>> {
        self.0.iter().find(|(i, _)| i == id).map(|(_, p)| p)
    }

    pub(crate) fn remove(&mut self, id: &u64) -> Option<Pending<W>> {
        let at = self.0.iter().position(|(i, _)| i == id)?;
        Some(self.0.remove(at).1)
    }

    pub(crate) fn ids_where(&self, f: impl Fn(&Pending<W>) -> bool) -> Vec<u64> {
        self.0.iter().filter(|(_, p)| f(p)).map(|(id, _)| *id).collect()
    }

    pub(crate) fn any(&self, f: impl Fn(&Pending<W>) -> bool) -> bool {
        self.0.iter().any(|(_, p)| f(p))
    }

    pub(crate) fn clear(&mut self) {
        self.0 = Vec::new();
    }

    /// The earliest deadline.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.0.iter().map(|(_, p)| p.deadline).min()
    }

    /// The oldest request's id, for tests.
    #[cfg(test)]
    pub(crate) fn first_id(&self) -> Option<u64> {
        self.0.first().map(|(id, _)| *id)
    }
}
