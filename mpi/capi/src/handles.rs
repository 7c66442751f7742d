//! A table of user-created objects named by int handles: handle = `base` +
//! slot index, so the predefined handles below `base` never collide with them.

use std::ffi::c_int;

use crate::consts::Handle;
use crate::error::Fail;

/// Objects of one kind by handle.
#[derive(Debug)]
pub(crate) struct Table<T> {
    base: Handle,
    slots: Vec<Option<T>>,
    free: Vec<usize>,
    /// The error class of a bad handle of this kind.
    class: c_int,
    kind: &'static str,
}

impl<T> Table<T> {
    pub(crate) const fn new(base: Handle, class: c_int, kind: &'static str) -> Self {
        Table { base, slots: Vec::new(), free: Vec::new(), class, kind }
    }

    /// Stores `v` under a new handle.
    pub(crate) fn insert(&mut self, v: T) -> Result<Handle, Fail> {
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(v);
                i
            }
            None => {
                self.slots.push(Some(v));
                self.slots.len() - 1
            }
        };
        Handle::try_from(i)
            .ok()
            .and_then(|i| i.checked_add(self.base))
            .ok_or_else(|| Fail::new(crate::consts::MPI_ERR_INTERN, format!("out of {} handles", self.kind)))
    }

    fn slot(&self, h: Handle) -> Option<usize> {
        usize::try_from(h.checked_sub(self.base)?).ok().filter(|&i| i < self.slots.len())
    }

    /// The error for a handle that names nothing.
    pub(crate) fn bad(&self, h: Handle) -> Fail {
        Fail::new(self.class, format!("{h} is not a valid {} handle", self.kind))
    }

    pub(crate) fn get(&self, h: Handle) -> Result<&T, Fail> {
        self.slot(h).and_then(|i| self.slots[i].as_ref()).ok_or_else(|| self.bad(h))
    }

    pub(crate) fn get_mut(&mut self, h: Handle) -> Result<&mut T, Fail> {
        match self.slot(h) {
            Some(i) if self.slots[i].is_some() => Ok(self.slots[i].as_mut().expect("checked")),
            _ => Err(self.bad(h)),
        }
    }

    /// Removes and returns the object of `h`; the handle may be reused.
    pub(crate) fn remove(&mut self, h: Handle) -> Result<T, Fail> {
        let i = self.slot(h).filter(|&i| self.slots[i].is_some()).ok_or_else(|| self.bad(h))?;
        self.free.push(i);
        Ok(self.slots[i].take().expect("checked"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_start_at_the_base_and_are_reused_after_removal() {
        let mut t = Table::new(10, 8, "group");
        let a = t.insert("a").unwrap();
        let b = t.insert("b").unwrap();
        assert_eq!((a, b), (10, 11));
        assert_eq!(*t.get(b).unwrap(), "b");
        assert_eq!(t.remove(a).unwrap(), "a");
        assert_eq!(t.get(a).unwrap_err().class, 8);
        assert!(t.remove(a).is_err() && t.get(9).is_err() && t.get(12).is_err());
        assert_eq!(t.insert("c").unwrap(), 10);
        *t.get_mut(10).unwrap() = "d";
        assert_eq!((*t.get(10).unwrap(), *t.get(11).unwrap()), ("d", "b"));
    }
}
