"""The stages of an averaging round (docs/architecture.md, "One round"): the message
(:mod:`.message`), its transforms (the leader's force, :mod:`.leader`; error feedback,
:mod:`.feedback`), the move (:mod:`.move`: all-reduce, or all-gather of compressed
messages), the landing (:mod:`.land`), put together by :mod:`.round`; the parts and
shares of the state they work on (:mod:`.parts`), the options that choose them
(:mod:`.options`) and DiLoCo's eager round (:mod:`.eager`)."""
