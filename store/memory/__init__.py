"""Memory across sessions: `base` (rows and the `MemoryStore` Protocol), `codec` (rows to columns
and back), and the `sqlite` and `postgres` backends. Open it with `store.factory.open_memory`."""
