//! One module per subcommand.

pub mod anchor;
pub mod backends;
pub mod bench;
pub mod check;
pub mod export;
pub mod metrics;
pub mod score;
