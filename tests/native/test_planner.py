"""The copy engine's planner on its own: how a transfer's pieces become parts, chunks of
staging and tasks. Nothing moves: the addresses are only numbers to the planner."""

import pytest
from hypothesis import given, strategies as st

from arrow_gpu import _cuda

ALIGNMENT = 64  # of staging slots, and of every part that does not join the one before it
MAX_GAP = 256  # device bytes between two parts that one DMA may span
MAX_TASK = 256 << 10


def plan(pieces, smallest, largest, largest_task=MAX_TASK, host_page=0, grow=True, shrink=True):
    parts, chunks, tasks = _cuda._plan_transfer(pieces, smallest, largest, largest_task,
                                                host_page, grow, shrink)
    check_plan(pieces, smallest if grow else largest, largest, parts, chunks, tasks,
               largest_task)
    if host_page:
        check_pages(pieces, host_page, parts, chunks)
    return parts, chunks, tasks


def check_plan(pieces, first, largest, parts, chunks, tasks, largest_task=MAX_TASK):
    """What every plan must be, whatever the pieces; the first chunk fills ``first`` bytes of
    staging at most, the others ``largest``."""
    # Every byte of every piece, once, in the order of the pieces.
    moved = [piece for piece in pieces if piece[2] > 0]
    index, done = 0, 0
    for host, device, size, _, _ in parts:
        assert index < len(moved), "a part past the last piece"
        piece_host, piece_device, piece_size, _, _ = moved[index]
        assert (host, device) == (piece_host + done, piece_device + done)
        assert 0 < size <= piece_size - done
        done += size
        if done == piece_size:
            index, done = index + 1, 0
    assert (index, done) == (len(moved), 0), "bytes left unplanned"

    # Chunks: consecutive runs of parts, in order, none empty.
    bounds = [0] + [end for _, end, _, _ in chunks]
    assert [begin for begin, _, _, _ in chunks] == bounds[:-1]
    assert bounds[-1] == len(parts)
    region_of = {}  # part -> the region of its piece
    position = 0
    for piece in moved:
        covered = 0
        while covered < piece[2]:
            region_of[position] = piece[3:]
            covered += parts[position][2]
            position += 1
    for number, (begin, end, nbytes, task_bytes) in enumerate(chunks):
        assert begin < end
        assert nbytes == sum(parts[k][2] for k in range(begin, end))
        assert ALIGNMENT <= task_bytes <= largest_task
        extent = max(parts[k][3] + parts[k][2] for k in range(begin, end))
        assert extent <= (first if number == 0 else largest)
        for k in range(begin, end):
            host, device, size, slot_offset, joins = parts[k]
            assert size <= task_bytes  # so that workers can share the chunk
            if k == begin:
                assert (slot_offset, joins) == (0, False)
                continue
            previous_end = parts[k - 1][1] + parts[k - 1][2]
            previous_slot_end = parts[k - 1][3] + parts[k - 1][2]
            region = region_of[k]
            can_join = (region == region_of[k - 1] and region[1] > region[0]
                        and 0 <= device - previous_end <= MAX_GAP)
            assert joins == can_join, (k, parts[k - 1], parts[k])
            if joins:  # the slot mirrors the device gap, for one DMA over both
                assert slot_offset == previous_slot_end + device - previous_end
            else:
                assert slot_offset % ALIGNMENT == 0 and slot_offset >= previous_slot_end

    # Tasks: each chunk's parts, in order, in runs just reaching the chunk's task size.
    ends = [0] + [end for _, _, end in tasks]
    assert [begin for _, begin, _ in tasks] == ends[:-1] and ends[-1] == len(parts)
    for (chunk, begin, end), following in zip(tasks, tasks[1:] + [None]):
        chunk_begin, chunk_end, _, task_bytes = chunks[chunk]
        assert chunk_begin <= begin < end <= chunk_end
        size = sum(parts[k][2] for k in range(begin, end))
        assert size - parts[end - 1][2] < task_bytes
        if end < chunk_end:
            assert size >= task_bytes
            assert following == (chunk, end, following[2])
        elif following is not None:
            assert following[:2] == (chunk + 1, chunks[chunk + 1][0])


def check_pages(pieces, page, parts, chunks):
    """What a download's plan must be besides: no part spans two host pages, and a chunk
    whose tasks are whole pages (or larger) ends inside a page only where a piece ends."""
    for host, _, size, _, _ in parts:
        assert host // page == (host + size - 1) // page, "a part spans two host pages"
    piece_ends = {piece[0] + piece[2] for piece in pieces}
    for begin, end, _, task_bytes in chunks:
        host, _, size, _, _ = parts[end - 1]
        if task_bytes >= page and (host + size) % page:
            assert host + size in piece_ends, "a chunk ended inside a page it could have left"


def one_piece(size, device=1 << 30, host=1 << 20):
    return (host, device, size, device, device + size)


def test_chunks_grow_from_the_smallest_to_the_slot_and_shrink_before_the_end():
    # 16 KiB through 1 KiB slots: the first chunks double from 64 bytes (the first DMA starts
    # early), the middle ones fill the slot, and the last halve again down to 64 bytes.
    _, chunks, _ = plan([one_piece(16 << 10)], 64, 1024)
    assert [nbytes for _, _, nbytes, _ in chunks] == (
        [64, 64, 128, 256, 512] + [1024] * 14 + [512, 256, 128, 64, 64])
    # A quarter of the chunk per task (at least 64 bytes): several workers share each chunk.
    assert [task_bytes for _, _, _, task_bytes in chunks][:7] == [64, 64, 64, 64, 128, 256, 256]


def test_an_uploads_chunks_only_grow_and_a_downloads_only_shrink():
    # The engine's large uploads start small (the first DMA waits for their first chunk's
    # staging) and end on full slots; its downloads start on a full slot (the first DMA
    # starts at once) and end small (the last chunk is unstaged after the last DMA).
    piece = [one_piece(16 << 10)]
    _, grown, _ = plan(piece, 64, 1024, shrink=False)
    assert [nbytes for _, _, nbytes, _ in grown] == [64, 64, 128, 256, 512] + [1024] * 15
    _, shrunk, _ = plan(piece, 64, 1024, grow=False)
    assert [nbytes for _, _, nbytes, _ in shrunk] == [1024] * 15 + [512, 256, 128, 64, 64]
    _, full, _ = plan(piece, 64, 1024, grow=False, shrink=False)
    assert [nbytes for _, _, nbytes, _ in full] == [1024] * 16


def test_a_downloads_tasks_are_whole_huge_pages_where_its_chunks_allow():
    # 64 MiB through 8 MiB slots, as the engine's defaults: an upload's workers share each
    # chunk in tasks of 256 KiB, a download's in tasks of 2 MiB, so that no two of them wait
    # on one huge page of fresh memory in turn.
    piece = [one_piece(64 << 20)]
    _, upload_chunks, upload_tasks = plan(piece, 256 << 10, 8 << 20)
    _, chunks, tasks = plan(piece, 256 << 10, 8 << 20, largest_task=2 << 20)
    assert [chunk[2] for chunk in chunks] == [chunk[2] for chunk in upload_chunks]
    full = [chunk[3] for chunk in chunks if chunk[2] == 8 << 20]
    assert full and set(full) == {2 << 20}
    assert {chunk[3] for chunk in upload_chunks if chunk[2] == 8 << 20} == {MAX_TASK}
    assert len(tasks) < len(upload_tasks)


def pages_by_task(parts, tasks, page):
    """The host pages each task writes."""
    return [{host // page for k in range(begin, end)
             for host in (parts[k][0], parts[k][0] + parts[k][2] - 1)}
            for _, begin, end in tasks]


@pytest.mark.parametrize("misaligned", [0, 4096, (1 << 20) + 64, (2 << 20) - 64])
def test_a_download_into_memory_off_its_huge_pages_faults_each_page_in_one_task(misaligned):
    # A 256 MiB download through 8 MiB slots whose destination starts `misaligned` bytes past
    # a huge page (pyarrow's default pool gives large buffers 4 KiB past one): once the
    # chunks are full slots, every page is written by one task alone.
    page = 2 << 20
    host = (1 << 30) + misaligned
    parts, chunks, tasks = plan([one_piece(256 << 20, host=host)], 256 << 10, 8 << 20,
                                largest_task=2 << 20, host_page=page)
    full = [t for t, task in enumerate(tasks) if chunks[task[0]][3] >= page]
    assert len(full) > len(tasks) // 2
    pages = pages_by_task(parts, tasks, page)
    writers = {}
    for t, written_by_t in enumerate(pages):
        for written in written_by_t:
            writers.setdefault(written, []).append(t)
    for t in full:
        for written in pages[t]:
            # The page the ramp-up's small chunks left half written is the one exception.
            others = [w for w in writers[written] if w != t]
            assert all(w < full[0] for w in others), (written, writers[written])
    # Without the cut, tasks of the same sizes span two pages each.
    uncut_parts, _, uncut_tasks = plan([one_piece(256 << 20, host=host)], 256 << 10, 8 << 20,
                                       largest_task=2 << 20)
    spans = [len(pages) for pages in pages_by_task(uncut_parts, uncut_tasks, page)]
    assert (max(spans) > 1) == (misaligned % page != 0)


def test_a_transfer_smaller_than_the_first_chunk_is_one_chunk_and_one_task():
    parts, chunks, tasks = plan([one_piece(40)], 64, 4096)
    assert [part[2] for part in parts] == [40]
    assert (len(chunks), tasks) == (1, [(0, 0, 1)])


def test_no_pieces_and_empty_pieces_plan_nothing():
    assert plan([], 64, 1024) == ([], [], [])
    parts, _, _ = plan([one_piece(0), one_piece(100, device=1 << 31), one_piece(0)], 64, 1024)
    assert sum(part[2] for part in parts) == 100


def test_pieces_close_together_in_one_region_join_into_one_dma():
    base, region = 1 << 32, (1 << 32, (1 << 32) + 4096)
    pieces = [(1000, base, 10, *region), (2000, base + 10 + MAX_GAP, 10, *region),
              (3000, base + 20 + 2 * MAX_GAP + 1, 10, *region)]
    parts, chunks, _ = plan(pieces, 4096, 4096)
    # The third is one byte too far: it starts at the next aligned offset after the second.
    assert [(part[3], part[4]) for part in parts] == [(0, False), (10 + MAX_GAP, True),
                                                      (320, False)]
    assert len(chunks) == 1


@pytest.mark.parametrize("region", ["another", "none"])
def test_pieces_of_other_regions_never_join(region):
    base = 1 << 32
    first = (1000, base, 10, base, base + 4096)
    second = ((2000, base + 20, 10, base + 20, base + 4096) if region == "another"
              else (2000, base + 20, 10, base + 20, base + 20))
    parts, _, _ = plan([first, second], 4096, 4096)
    assert [(part[3], part[4]) for part in parts] == [(0, False), (ALIGNMENT, False)]


def test_a_piece_below_the_one_before_it_does_not_join():
    base, region = 1 << 32, (1 << 32, (1 << 32) + 4096)
    parts, _, _ = plan([(1000, base + 100, 10, *region), (2000, base, 10, *region)], 4096, 4096)
    assert [part[4] for part in parts] == [False, False]


@pytest.mark.parametrize("smallest, largest", [(0, 64), (-64, 64), (65, 128), (128, 64),
                                               (64, 100)])
def test_chunk_sizes_the_planner_cannot_use_are_refused(smallest, largest):
    # A zero limit would plan forever; the pipeline itself only passes multiples of 64.
    with pytest.raises(ValueError, match="multiples of 64"):
        _cuda._plan_transfer([one_piece(10)], smallest, largest)


def test_a_negative_host_page_is_refused():
    with pytest.raises(ValueError, match="must not be negative"):
        _cuda._plan_transfer([one_piece(10)], 64, 64, MAX_TASK, -1)


def test_a_negative_piece_size_is_refused():
    with pytest.raises(ValueError, match="must not be negative"):
        _cuda._plan_transfer([one_piece(-1)], 64, 64)


@st.composite
def transfers(draw):
    """Pieces in a few regions (or none), with gaps around the largest a DMA spans."""
    pieces = []
    regions = draw(st.integers(1, 3))
    cursor = {region: 0 for region in range(regions)}
    host = 4096
    for _ in range(draw(st.integers(1, 12))):
        region = draw(st.integers(0, regions - 1))
        size = draw(st.integers(0, 3000))
        gap = draw(st.sampled_from([0, 1, 63, MAX_GAP - 1, MAX_GAP, MAX_GAP + 1, 5000]))
        begin = (region + 1) << 32
        device = begin + cursor[region] + gap
        cursor[region] += gap + size
        own = draw(st.booleans())  # a region of its own: joins nothing
        bounds = (device, device + size) if own else (begin, begin + (1 << 31))
        pieces.append((host + draw(st.integers(0, 63)), device, size, *bounds))
        host += size + 4096
    shift = draw(st.integers(0, 5))
    smallest = ALIGNMENT * draw(st.integers(1, 16))
    return pieces, smallest, smallest << shift


@given(transfers(), st.sampled_from([0, 64, 256, 1000, 4096]), st.booleans(), st.booleans())
def test_every_plan_covers_each_byte_once_in_order_within_its_chunks(transfer, host_page, grow,
                                                                     shrink):
    pieces, smallest, largest = transfer
    plan(pieces, smallest, largest, MAX_TASK, host_page, grow, shrink)
