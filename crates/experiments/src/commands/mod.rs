//! One module per subcommand.

pub mod anchor;
pub mod backends;
pub mod check;
