//! The models crate's integration tests, one binary (burn and wgpu are linked once): the
//! dropout methods and the ensembles.

mod dropout;
mod ensembles;
