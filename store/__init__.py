"""Storage, a room of its own: what Pivot keeps and where.

Holds the records an investigation produces (`records`), memory (`memory/`), the loop's ledger
(`ledger/`), LangGraph checkpoints, run leases, PostgreSQL helpers and `pivot db copy`. Each
store has one interface (`memory.base.MemoryStore`, `ledger.base.LedgerStore`), a SQLite and a
PostgreSQL backend that share a codec, and is opened through `store.factory`, which alone picks
the backend; no backend imports the factory.

May import: the standard library and third-party packages only; never `agent`, `loop`, `server`,
`tools` or anything above them (tests/test_layering.py holds it to that).
"""
