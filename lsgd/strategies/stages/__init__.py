"""The stages of an averaging round (docs/architecture.md, "One round"), put together
by :mod:`.round`: the message, its transforms (the leader's force, error feedback), the
move and the landing; the parts of the state they work on, the options that choose
them and DiLoCo's eager round."""
