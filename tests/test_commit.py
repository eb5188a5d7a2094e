"""The commit of a job's outputs (``framework/utilities/_commit.py``): staged files renamed together
when the job succeeded, removed when it failed; a commit inside another joins it; a signal
during the renames waits for the last one. Jobs end to end: ``test_bad_outputs.py``.
"""

from __future__ import annotations

import os
import signal

import pytest
import trio

from framework import FileWriteError
from framework.io import atomic_write
from framework.utilities import commit_outputs, current_commit, stage_output


def write(path, text):
    with atomic_write(path, "test writer") as temp:
        temp.write_text(text)


def test_files_appear_together_at_the_commit(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("previous a")
    with commit_outputs("job") as commit:
        write(a, "new a")
        write(b, "new b")
        assert a.read_text() == "previous a" and not b.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", *sorted(s.temp.name for s in commit.staged)]
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
    assert commit.committed == [a, b] and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


@pytest.mark.parametrize("error", [RuntimeError("a module failed"), KeyboardInterrupt()])
def test_a_failure_removes_every_temporary_file_and_keeps_the_previous_ones(tmp_path, error):
    a = tmp_path / "a.txt"
    a.write_text("previous a")
    with pytest.raises(type(error)), commit_outputs("job"):
        write(a, "new a")
        write(tmp_path / "b.txt", "new b")
        raise error
    assert a.read_text() == "previous a" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_a_failed_writer_leaves_nothing_and_the_rest_still_commits(tmp_path):
    with commit_outputs("job"):
        with pytest.raises(ValueError), atomic_write(tmp_path / "bad.txt") as temp:
            temp.write_text("half")
            raise ValueError("the writer failed")
        write(tmp_path / "good.txt", "good")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.txt"]


def test_nested_commits_join_the_outer_one_and_trio_sees_it(tmp_path):
    async def job():
        with commit_outputs("inner") as inner:
            write(tmp_path / "x.txt", "x")
            await trio.to_thread.run_sync(write, tmp_path / "y.txt", "y")  # a worker thread's write
        return inner

    with commit_outputs("outer") as outer:
        assert trio.run(job) is outer
        assert not (tmp_path / "x.txt").exists()  # the inner block did not commit
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt", "y.txt"]
    assert current_commit() is None


def test_without_a_commit_a_file_is_renamed_when_complete(tmp_path):
    write(tmp_path / "alone.txt", "alone")
    assert (tmp_path / "alone.txt").read_text() == "alone"


def test_a_file_begun_but_never_completed_fails_the_commit(tmp_path):
    never = r"writer 'w': '.*/a.txt' was begun but never completed"
    with pytest.raises(FileWriteError, match=never), commit_outputs("job"):
        staged = stage_output(tmp_path / "a.txt", "writer 'w'")
        staged.temp.write_text("never closed")
        write(tmp_path / "b.txt", "b")
    assert list(tmp_path.iterdir()) == []


def test_a_rename_that_fails_names_the_file_and_removes_the_rest(tmp_path):
    folder = tmp_path / "gone"
    folder.mkdir()
    with pytest.raises(FileWriteError, match=r"writer 'w': cannot write '.*/gone/a.txt'"), commit_outputs("job"):
        write(tmp_path / "first.txt", "first")
        staged = stage_output(folder / "a.txt", "writer 'w'")
        staged.done()  # complete, but its temporary file is missing (its folder removed)
        write(tmp_path / "last.txt", "last")
        os.rmdir(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.txt"]  # renamed before the failure


def test_a_signal_during_the_renames_is_delivered_after_the_last(tmp_path, monkeypatch):
    names = [tmp_path / f"{i}.txt" for i in range(3)]
    real_replace = os.replace
    seen = []

    def replace_then_signal(src, dst):
        real_replace(src, dst)
        if not seen:
            signal.raise_signal(signal.SIGINT)  # as Ctrl-C right after the first rename
        seen.append(dst)

    monkeypatch.setattr(os, "replace", replace_then_signal)
    with pytest.raises(KeyboardInterrupt), commit_outputs("job"):
        for name in names:
            write(name, name.name)
    assert len(seen) == 3 and all(n.exists() for n in names)
