//! p2pmp-jobd: the node daemon `jobd` and the user tool `p2pjob`.
//!
//! Will hold the control socket, process spawning and file staging around the job
//! lifecycle machine of `p2pmp-core`, and the two binaries.
