//! End-to-end tests through the `uqbench` binary.
//!
//! One binary, split by command: `util` holds what the tests share.

mod agents;
mod anchor;
mod backends;
mod bad_specs;
mod bench;
mod compare;
mod decide;
mod design;
mod draws;
mod export_and_score;
mod gpu_check;
mod host;
mod limits;
mod lockstep;
mod metrics_command;
mod one_rep;
mod parts;
mod posthoc;
mod preflight;
mod run;
mod slurm;
mod tracks;
mod util;
