//! The engine crate's integration tests, one binary (burn and wgpu are linked once): the
//! backends and the engine.

mod backends;
mod engine;
mod tasks;
mod util;
