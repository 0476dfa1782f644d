"""How every index and folder reaches disk: one atomic publish (``atomic``: temporary file in
the target's folder, fsync, rename; stale temporary files of dead writers removed) and one
checksummed container of aligned array sections (``sectioned``)."""
