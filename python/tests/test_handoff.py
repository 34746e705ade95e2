"""How results reach the event loop (python/src/handoff.rs): through the loop's inbox (a
socket the loop watches), several at once, after a cancellation, and through
`call_soon_threadsafe` on a loop that cannot watch a socket."""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

import pytest

from sandboxio import LocalBackend, Sandbox
from sandboxio.errors import SandboxioError


class NoReaderLoop(asyncio.SelectorEventLoop):
    """A loop that cannot watch a file descriptor (as some loops cannot)."""

    def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:
        raise NotImplementedError


async def _many(backend: LocalBackend) -> None:
    async with await Sandbox.create(backend) as sbx:
        names = [f"f{i}.txt" for i in range(6)]
        await asyncio.gather(*(sbx.write_file(n, n) for n in names))
        texts = await asyncio.gather(*(sbx.read_text(n) for n in names))
        assert texts == names
        assert (await sbx.run_code("print(6 * 7)")).stdout.strip() == "42"


def test_concurrent_results_each_reach_their_own_future(backend: LocalBackend) -> None:
    asyncio.run(_many(backend))


def test_a_loop_without_add_reader_gets_its_results_too(backend: LocalBackend) -> None:
    loop = NoReaderLoop(selectors.DefaultSelector())
    try:
        loop.run_until_complete(_many(backend))
    finally:
        loop.close()


def test_each_loop_gets_its_results_one_after_another(backend: LocalBackend) -> None:
    for _ in range(3):
        asyncio.run(_many(backend))


def test_a_cancelled_call_leaves_the_loop_able_to_take_the_next_result(backend: LocalBackend) -> None:
    async def main() -> None:
        async with await Sandbox.create(backend) as sbx:
            task = asyncio.ensure_future(sbx.run_code("import time; time.sleep(30)"))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await sbx.write_file("after.txt", "ok")
            assert await sbx.read_text("after.txt") == "ok"

    asyncio.run(main())


def test_two_loops_in_two_threads_each_get_their_own_results(tmp_path: Any) -> None:
    # The binding keeps the mailbox of the loop it saw last: calls from two loops in turn
    # must each still reach their own loop (a result set from another loop's thread, or
    # never set, fails or hangs here).
    import threading

    errors: list[BaseException] = []

    def worker(name: str) -> None:
        async def main() -> None:
            d = tmp_path / name
            d.mkdir(mode=0o700)
            async with await Sandbox.create(LocalBackend(state_dir=d)) as sbx:
                for i in range(15):
                    await sbx.write_file(f"{name}{i}.txt", f"{name}{i}")
                    assert await sbx.read_text(f"{name}{i}.txt") == f"{name}{i}"
                assert (await sbx.run_code(f"print('{name}')")).stdout == f"{name}\n"

        try:
            asyncio.run(asyncio.wait_for(main(), 120))
        except BaseException as e:  # noqa: BLE001 (reported by the test's thread)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_small_and_large_requests_both_complete(backend: LocalBackend) -> None:
    """A small request's operation starts on the loop's thread, a large one (over 16 KiB of
    content or code) on the runtime (python/src/session.rs): both answer, in any order,
    and a denial made before the first wait (a path outside the workspace) still reaches
    its future."""

    async def main() -> None:
        async with await Sandbox.create(backend) as sbx:
            big = "x" * (100 * 1024)
            small = "y" * 10
            await asyncio.gather(sbx.write_file("big.txt", big), sbx.write_file("small.txt", small))
            assert await sbx.read_text("big.txt") == big
            assert await sbx.read_text("small.txt") == small
            code = "# " + "z" * (20 * 1024) + "\nprint(6 * 7)"
            assert (await sbx.run_code(code)).stdout.strip() == "42"
            assert (await sbx.run_code("print(6 * 7)")).stdout.strip() == "42"
            with pytest.raises(SandboxioError) as denied:
                await sbx.write_file("/etc/sandboxio-handoff-test", "no")
            assert denied.value.code.startswith("SBX_E"), denied.value

    asyncio.run(main())
