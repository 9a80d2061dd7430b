//! Near-data operations: the drive side ([`oed_store::near_data`]), which folds the data chunks a drive
//! holds into partials off the I/O path, and the coordinator side ([`coordinator`]),
//! which plans an operation for an object, sends it to the drives that hold its data
//! shards, rebuilds from parity what a drive could not fold, and merges the partials in
//! object order; [`compress`] writes an object's frames, made on its drives, as a new
//! object; [`sort`] sorts an object's records into a new one (the drives sort their
//! chunks, the coordinator merges); [`vector`] adds two objects into a third through the
//! coordinator. The kernels themselves are `oed-ops`'.

pub mod compress;
pub mod coordinator;
mod parts;
pub mod sort;
pub mod vector;
