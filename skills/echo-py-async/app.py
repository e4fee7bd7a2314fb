"""`echo-py-async`: `echo-py` as an async (WASI 0.3) component: its world
exports `run` as an `async func`, so componentize-py builds it for the
component model's async ABI, and `run` is a coroutine."""

import wit_world
from wit_world import Input, Output
from skillhost_sdk import invalid_input, log, manifest, skill_run

# Larger outputs are refused rather than built.
MAX_OUTPUT_BYTES = 1 << 20

MANIFEST = manifest(
    id="echo-py-async",
    name="Echo (Python, async)",
    version="0.1.0",
    description="Repeats a message; the echo skill in Python, as an async (WASI 0.3) component",
    capabilities=["log"],
)


def echo(message: str, repeat: int) -> Output:
    size = len(message.encode("utf-8"))
    total = size * repeat
    if total > MAX_OUTPUT_BYTES:
        raise invalid_input(
            f"{size} bytes repeated {repeat} times is {total} bytes, more than {MAX_OUTPUT_BYTES}"
        )
    text = message * repeat
    log.info(f"echo: {len(text)} characters")
    return Output(message=text, length=len(text))


class WitWorld(wit_world.WitWorld):
    def manifest(self):
        return MANIFEST

    @skill_run
    async def run(self, input: Input) -> Output:
        return echo(input.message, input.repeat)
