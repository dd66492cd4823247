package store

// The store's rules that do not depend on DynamoDB, exported so that every
// implementation of the scheduler's store port (the in-memory one in
// memstore) refuses and decides exactly as this one does.
