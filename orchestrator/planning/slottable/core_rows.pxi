# The loops over many hosts' rows, for the host states and the mapper: the host states' refresh of their
# rows (`refresh_rows`), how many nodes of a size each changed row takes (`recount_rows`) and at a later
# time (`room_later`), which rows are alike (`rows_alike`), the mapper's walk of alike nodes (`alike_walk`)
# and the hosts at its head that need no walk (`steady_head`). Part of the slot table's core: core.pyx
# includes this file (one compiled module; the timelines' C arrays are read here directly), and
# tests/reference/core.py is the naive twin of each.


def refresh_rows(list timelines, list rows, key_t k, dict vectors, list used, list code, list count, list ids,
                 dict by_code, new_code, list capacities, list cpu_free, key_t[::1] since, key_t[::1] until):
    """Read each of `rows` afresh from its timeline at key k into the host states' rows (`_RowValues`'s
    lists: usage, code, count, palette id (`by_code`, else `new_code(code, usage)`), whether some CPU is
    free) and windows (`since`, `until`: the breakpoints around k). Returns (the change in the number of
    rows with free CPU, the latest `since` and the earliest `until` written)."""
    cdef Py_ssize_t i, j, n
    cdef HostTimeline tl
    cdef key_t c, lo, hi, most = BEFORE_ALL, least = AFTER_ALL
    cdef Py_ssize_t freed = 0
    cdef bint free, first = True
    cdef double epsilon = EPSILON, cpu = 0
    cdef key_t last = 0
    v = vid = code_object = None
    for i in rows:
        tl = <HostTimeline>timelines[i]
        n = tl._n
        j = _upper(tl._keys, 0, n, k)
        hi = tl._keys[j] if j < n else AFTER_ALL
        if j:
            c, lo = tl._codes[j - 1], tl._keys[j - 1]
            count[i] = tl._count[j - 1]
        else:
            c, lo = NOTHING_CODE, BEFORE_ALL
            count[i] = 0
        if first or c != last:   # (rows read together often hold the same usage: a lease's hosts)
            code_object = c
            v = vectors[code_object]
            vid = by_code.get(code_object)
            if vid is None:
                vid = new_code(code_object, v)
            cpu = <double>(<tuple>v)[0]
            last, first = c, False
        used[i] = v
        code[i] = code_object
        ids[i] = vid
        free = <double>(<tuple>capacities[i])[0] - cpu > epsilon
        if free != <bint>cpu_free[i]:
            freed += 1 if free else -1
            cpu_free[i] = free
        since[i] = lo
        until[i] = hi
        if lo > most:
            most = lo
        if hi < least:
            least = hi
    return freed, most, least


def alike_walk(packing, list ranked, hosts, Py_ssize_t potential, list held):
    """The mapper's reserve stage for alike nodes on a packing policy (`mapper._AlikePacking` says what
    its two packings are): host by host along the ranking (the filter stage kept hosts with room for one
    node at least), each taking as many nodes as fit in each packing still being built; either packing
    is given up as soon as the hosts left cannot make up the difference (the walk ends when both are: a
    lease that finds no placement does not walk the rest of the site). `held`: what the steady head
    took; `potential`: the nodes the hosts not walked yet could take at the start. `packing` is the
    `_AlikePacking` (its ask, node, timelines by row and keys; its `_latest_fit`, `_most_that_fit` and `_mapping`
    for the steps taken rarely). Returns the mapping, or None."""
    ask = packing.ask
    names, node, timelines = hosts.names, packing.node, packing.row_timelines
    start, end, excluding = ask.start, ask.end, ask.excluding
    floor = start if ask.floor is None else ask.floor
    latest_fit, most_that_fit = packing._latest_fit, packing._most_that_fit
    cdef Py_ssize_t n = len(ask.vnodes)
    cdef key_t start_key = packing.start_key, end_key = packing.end_key
    cdef bint strict = ask.strict_end or ask.strict_first   # still building the packing that holds to the end
    cdef bint loose = not ask.strict_end                     # building the one that may end early
    cdef bint steady_row, has_steady = packing.steady is not None
    cdef const double[:] room = hosts.room
    cdef const key_t[:] steady
    cdef double r[5]
    cdef Py_ssize_t f
    cdef _Fits seen   # (the node's fit by usage code, for every host's `_scan` in this walk)
    seen.n = seen.next = 0
    seen.cap = NULL
    for f in range(5):
        r[f] = node[f]
    if has_steady:
        steady = packing.steady
    early = list(held)
    early_end = end if held else None
    cdef Py_ssize_t row, k, take, early_take, early_count = len(held), held_count = len(held)
    fit_end = None
    for row in ranked:
        k = <Py_ssize_t>room[row]
        steady_row = has_steady and steady[row] >= end_key
        host = names[row]
        potential -= k
        early_take = -1   # (not tried on this host)
        if loose and early_count < n:
            take = k if k < n - early_count else n - early_count
            if steady_row:
                fit_end = end
            else:
                if take == 1 and not excluding:
                    fit_end = (<HostTimeline>timelines[row])._scan(start_key, end_key, r, &seen)
                    if fit_end is None:
                        fit_end = end
                    elif fit_end is AT_START:
                        fit_end = None
                else:
                    fit_end = latest_fit(host, node if take == 1 else _scale(node, take))
                while (fit_end is None or fit_end <= start or fit_end < floor) and take > 1:
                    take -= 1
                    fit_end = latest_fit(host, _scale(node, take))
                if fit_end is None or fit_end <= start or fit_end < floor:
                    take = 0
            early_take = take
            if take:
                if take == 1:
                    early.append(host)
                else:
                    early.extend([host] * take)
                early_count += take
                if early_end is None or fit_end < early_end:
                    early_end = fit_end
            if early_count + potential < n:   # (the hosts left cannot make up the difference either)
                if not strict:
                    return None
                loose = False
        if strict:
            take = k if k < n - held_count else n - held_count
            if steady_row:
                pass
            elif early_take == 0:
                take = 0
            elif early_take == take:
                if fit_end < end:
                    take = 0 if take == 1 else most_that_fit(host, take - 1)
            elif not excluding and take == 1:
                take = 1 if (<HostTimeline>timelines[row])._scan(start_key, end_key, r, &seen) is None else 0
            else:
                take = most_that_fit(host, take)
            if take:
                if take == 1:
                    held.append(host)
                else:
                    held.extend([host] * take)
                held_count += take
                if held_count == n:
                    return packing._mapping(held, end)
            if held_count + potential < n:
                if not loose:
                    return None
                strict = False
        if loose and early_count == n and not strict:
            break
    if loose and early_count == n:
        return packing._mapping(early, early_end)
    return None


def rows_alike(list rows, list ids, list counts, list groups):
    """Whether these rows (non-empty) hold the same palette id, reservation count and capacity group
    (`HostStates.alike`: every host-selection policy's keys then tie on them)."""
    cdef Py_ssize_t i, first = rows[0]
    cdef Py_ssize_t vid = ids[first], count = counts[first], group = groups[first]
    for i in rows:
        if <Py_ssize_t>ids[i] != vid or <Py_ssize_t>counts[i] != count or <Py_ssize_t>groups[i] != group:
            return False
    return True


def recount_rows(rows, list code, list groups, list known, list per_row, double[::1] array, learn,
                 list used, list capacities):
    """The host states' count of nodes of one size per row (`_Room`: `per_row` and its numpy `array`),
    brought up to date for `rows` (a row may come more than once: it is then counted once) from each row's
    usage code, through the counts known per capacity group and code (`known[group]`; else
    `learn(group, code, used[row], capacities[row])`). Returns the change in the rows' sum."""
    cdef Py_ssize_t i, fit, delta = 0, group, last_group = -1
    cdef key_t last_code = 0
    cdef dict memo
    last = None
    for i in rows:
        c = code[i]
        g = groups[i]
        group = g
        if group == last_group and <key_t>c == last_code:   # (rows counted together often hold the same usage)
            f = last
        else:
            memo = <dict>known[group]
            f = memo.get(c)
            if f is None:
                f = learn(g, c, used[i], capacities[i])
            last, last_group, last_code = f, group, c
        fit = f
        if fit != <Py_ssize_t>per_row[i]:
            delta += fit - <Py_ssize_t>per_row[i]
            per_row[i] = f
            array[i] = fit
    return delta


def room_later(list timelines, const key_t[::1] until, key_t k, list rows, Py_ssize_t most, list per_row,
               list groups, list known, learn, dict vectors, list capacities):
    """How the count of nodes of one size (per row: `per_row`, at the time the host states are at) changes
    by the later key k, over `rows` (None: every row): only the rows whose window ends by k (`until[row]
    <= k`) are read again, at k, from their timelines; their count comes from `known[group][code]`, else
    `learn(group, code, usage, capacity)`. Returns the change, or None when more than `most` rows change
    (most < 0: no limit)."""
    cdef Py_ssize_t i, j, n = until.shape[0], delta = 0
    cdef HostTimeline tl
    cdef key_t c
    cdef list which = []
    if rows is None:
        for i in range(n):
            if until[i] <= k:
                which.append(i)
    else:
        for i in rows:
            if until[i] <= k:
                which.append(i)
    if most >= 0 and len(which) > most:
        return None
    cdef Py_ssize_t group, last_group = -1
    cdef key_t last_code = 0
    last = None
    for i in which:
        tl = <HostTimeline>timelines[i]
        j = _upper(tl._keys, 0, tl._n, k)
        c = tl._codes[j - 1] if j else NOTHING_CODE
        g = groups[i]
        group = g
        if group == last_group and c == last_code:   # (as in recount_rows)
            f = last
        else:
            f = (<dict>known[group]).get(c)
            if f is None:
                f = learn(g, c, vectors[c], capacities[i])
            last, last_group, last_code = f, group, c
        delta += <Py_ssize_t>f - <Py_ssize_t>per_row[i]
    return delta


def steady_head(list ranked, list names, list per_row, const key_t[::1] steady, key_t end_key, Py_ssize_t n,
                list held):
    """The mapper's steady head (`_AlikePacking._take_steady_head`): the hosts at the head of the ranking
    whose usage stays until `end_key` (`steady[row] >= end_key`) each take all the nodes they have room for
    (`per_row`), up to n in all, added to `held` by name. Returns how many hosts were taken."""
    cdef Py_ssize_t row, k, got = 0, taken = 0
    for row in ranked:
        if steady[row] < end_key:
            break
        k = per_row[row]
        if k >= n - got:
            held.extend([names[row]] * (n - got))
            return taken + 1
        held.extend([names[row]] * k)
        got += k
        taken += 1
    return taken
