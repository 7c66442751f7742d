//! Communicators: the handle table (`MPI_COMM_WORLD`, `MPI_COMM_SELF` and the
//! ones programs make), each with its error handler, name, attributes and
//! topology; rank arguments as the calls see them.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::rc::Rc;

use p2pmp_mpi::World;

use crate::attr::AttrVal;
use crate::consts::{
    Handle, MPI_ANY_SOURCE, MPI_COMM_NULL, MPI_COMM_SELF, MPI_COMM_WORLD, MPI_ERR_COMM, MPI_ERR_ROOT,
    MPI_ERRORS_ARE_FATAL, MPI_PROC_NULL,
};
use crate::error::Fail;
use crate::handles::Table;
use crate::topo::Topo;

/// A communicator as a call sees it: its handle and the library's
/// communicator, shared with the handle's entry through an `Rc` (the state is
/// the thread's that called `MPI_Init`): a call takes it with a plain count,
/// unlike a clone of the library's communicator (whose groups are `Arc`s).
#[derive(Debug, Clone)]
pub(crate) struct Comm {
    pub(crate) handle: Handle,
    pub(crate) c: Rc<p2pmp_mpi::Comm>,
}

/// Where a point-to-point call goes, in the communicator's ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// `MPI_PROC_NULL`: the call completes at once and moves nothing.
    Null,
    /// `MPI_ANY_SOURCE` (receives and probes only).
    Any,
    /// A rank (of the remote group of an intercommunicator).
    Rank(u32),
}

impl Comm {
    pub(crate) fn size(&self) -> u32 {
        self.c.size()
    }

    pub(crate) fn rank(&self) -> u32 {
        self.c.rank()
    }

    /// A destination: a rank or `MPI_PROC_NULL`.
    pub(crate) fn dest(&self, r: c_int) -> Result<Peer, Fail> {
        if r == MPI_PROC_NULL {
            return Ok(Peer::Null);
        }
        let r = u32::try_from(r).map_err(|_| p2pmp_mpi::Error::Rank(format!("rank {r}")))?;
        self.c.peer(r)?;
        Ok(Peer::Rank(r))
    }

    /// A source: a rank, `MPI_ANY_SOURCE` or `MPI_PROC_NULL`.
    pub(crate) fn source(&self, r: c_int) -> Result<Peer, Fail> {
        if r == MPI_ANY_SOURCE { Ok(Peer::Any) } else { self.dest(r) }
    }

    /// The communicator rank of the world rank a status names.
    pub(crate) fn comm_rank_of(&self, w: u32) -> c_int {
        self.c.source_rank(w).map_or(MPI_ANY_SOURCE, |r| r as c_int)
    }

    /// Root `r` of an intracommunicator collective; `MPI_ERR_ROOT` outside it.
    pub(crate) fn root(&self, r: c_int) -> Result<u32, Fail> {
        self.c.check_intra("a collective")?;
        u32::try_from(r)
            .ok()
            .filter(|&r| r < self.size())
            .ok_or_else(|| Fail::new(MPI_ERR_ROOT, format!("root {r} is not in a communicator of {}", self.size())))
    }
}

/// What the library keeps about one communicator.
#[derive(Debug)]
pub(crate) struct Entry {
    /// `None` for the predefined ones before `MPI_Init`.
    pub(crate) comm: Option<Rc<p2pmp_mpi::Comm>>,
    pub(crate) errhandler: Handle,
    pub(crate) name: String,
    pub(crate) attrs: BTreeMap<c_int, AttrVal>,
    pub(crate) topo: Option<Topo>,
}

impl Entry {
    pub(crate) const fn new(name: String) -> Entry {
        Entry { comm: None, errhandler: MPI_ERRORS_ARE_FATAL, name, attrs: BTreeMap::new(), topo: None }
    }
}

/// Every live communicator by handle.
#[derive(Debug)]
pub(crate) struct Comms {
    world: Entry,
    solo: Entry,
    made: Table<Entry>,
}

impl Comms {
    pub(crate) const fn new() -> Comms {
        Comms {
            world: Entry::new(String::new()),
            solo: Entry::new(String::new()),
            made: Table::new(MPI_COMM_SELF + 1, MPI_ERR_COMM, "communicator"),
        }
    }

    /// `MPI_Init` made the world.
    pub(crate) fn init(&mut self, w: &World) {
        self.world.comm = Some(Rc::new(w.comm_world()));
        self.world.name = "MPI_COMM_WORLD".into();
        self.solo.comm = Some(Rc::new(w.comm_self()));
        self.solo.name = "MPI_COMM_SELF".into();
    }

    pub(crate) fn entry(&self, h: Handle) -> Result<&Entry, Fail> {
        match h {
            MPI_COMM_WORLD => Ok(&self.world),
            MPI_COMM_SELF => Ok(&self.solo),
            MPI_COMM_NULL => Err(Fail::new(MPI_ERR_COMM, "MPI_COMM_NULL is not a communicator".into())),
            _ => self.made.get(h),
        }
    }

    pub(crate) fn entry_mut(&mut self, h: Handle) -> Result<&mut Entry, Fail> {
        match h {
            MPI_COMM_WORLD => Ok(&mut self.world),
            MPI_COMM_SELF => Ok(&mut self.solo),
            MPI_COMM_NULL => Err(Fail::new(MPI_ERR_COMM, "MPI_COMM_NULL is not a communicator".into())),
            _ => self.made.get_mut(h),
        }
    }

    /// The communicator of `h` (a running library's).
    pub(crate) fn get(&self, h: Handle) -> Result<Comm, Fail> {
        let e = self.entry(h)?;
        let c = e.comm.clone().ok_or_else(|| Fail::new(MPI_ERR_COMM, format!("communicator {h} is not ready")))?;
        Ok(Comm { handle: h, c })
    }

    /// The error handler of `h`, or the world's when `h` is no communicator.
    pub(crate) fn errhandler(&self, h: Handle) -> Handle {
        self.entry(h).unwrap_or(&self.world).errhandler
    }

    /// Stores a new communicator made from `parent` (error handler inherited).
    pub(crate) fn add(&mut self, parent: Handle, c: p2pmp_mpi::Comm) -> Result<Handle, Fail> {
        let errhandler = self.errhandler(parent);
        self.made.insert(Entry { comm: Some(Rc::new(c)), errhandler, ..Entry::new(String::new()) })
    }

    /// Forgets a communicator the program made.
    pub(crate) fn remove(&mut self, h: Handle) -> Result<Entry, Fail> {
        if h == MPI_COMM_WORLD || h == MPI_COMM_SELF {
            return Err(Fail::new(MPI_ERR_COMM, "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed".into()));
        }
        self.entry(h)?;
        self.made.remove(h)
    }
}
