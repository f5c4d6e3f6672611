// leasewise's calendar: hosts against time, drawn on a canvas from the page's JSON (and from
// /calendar.json when moving in time). Written for this page alone, no library. Only what is in view is
// drawn, so hundreds of hosts and thousands of reservations stay quick: the canvas stays put (sticky)
// while a sizer of the full drawing's size gives the browser's own scroll bars.
//
// Each bar is one reservation on one host: its colour and its pattern say its kind, a faded bar is done,
// a thick outline is one of your leases. A host's row holds as many lanes as its overlapping bars need.
// window.leasewiseCalendar lets scripts (and the tests) ask what is drawn: summary(), reveal(leaseId).
(function () {
  "use strict";

  var LABEL_W = 176, AXIS_H = 40, LANE_H = 20, ROW_PAD = 4, MIN_BAR_PX = 3;
  var ZOOMS = [1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96];
  var STEPS = [60, 300, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];
  var DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
  var MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  var FIELDS = 7;   // host, kind, lease, start, end, state, role

  var scroller, sizer, canvas, ctx, tip, status, zoomText;
  var data = null, rows = [], shown = [], tops = [], totalHeight = 0;
  var kindOf, startOf, endOf, leaseOf, stateOf, roleOf, hostOf, laneOf;
  var patterns = {}, zoomIndex = 0, selected = -1, filterText = "", mineOnly = false, pending = false;

  // -- the data ---------------------------------------------------------------------------------------------
  function load(next) {
    data = next;
    var flat = data.bars, n = flat.length / FIELDS;
    hostOf = new Int32Array(n); kindOf = new Int32Array(n); leaseOf = new Int32Array(n);
    startOf = new Float64Array(n); endOf = new Float64Array(n); stateOf = new Int8Array(n);
    roleOf = new Int8Array(n); laneOf = new Int16Array(n);
    rows = data.hosts.map(function (h, i) {
      return { index: i, name: h[0], vcpus: h[1], mib: h[2], drained: h[3], silent: h[4], bars: [], lanes: 1 };
    });
    for (var b = 0; b < n; b++) {
      var o = b * FIELDS;
      hostOf[b] = flat[o]; kindOf[b] = flat[o + 1]; leaseOf[b] = flat[o + 2];
      startOf[b] = flat[o + 3]; endOf[b] = flat[o + 4]; stateOf[b] = flat[o + 5]; roleOf[b] = flat[o + 6];
      rows[flat[o]].bars.push(b);
    }
    rows.forEach(assignLanes);
    selected = -1;
    filter();
  }

  // Greedy interval partitioning, as the terminal's Gantt does it: a bar goes on the first lane whose bars
  // all end by its start; a zero-length bar only needs to fall outside every bar of the lane.
  function assignLanes(row) {
    row.bars.sort(function (a, b) {
      return startOf[a] - startOf[b] || endOf[a] - endOf[b] || leaseOf[a] - leaseOf[b] || a - b;
    });
    var ends = [];
    row.bars.forEach(function (b) {
      var lane = 0;
      while (lane < ends.length && startOf[b] < ends[lane]) lane++;
      if (lane === ends.length) ends.push(startOf[b]);
      if (endOf[b] > startOf[b]) ends[lane] = Math.max(ends[lane], endOf[b]);
      laneOf[b] = lane;
    });
    row.lanes = Math.max(1, ends.length);
  }

  function lease(b) { return data.leases[leaseOf[b]]; }
  function mine(b) { return lease(b)[2] === data.me; }
  function visibleBar(b) { return !mineOnly || mine(b); }

  function filter() {
    var text = filterText.toLowerCase();
    shown = rows.filter(function (r) { return !text || r.name.toLowerCase().indexOf(text) >= 0; });
    tops = new Array(shown.length);
    var y = 0;
    for (var i = 0; i < shown.length; i++) { tops[i] = y; y += shown[i].lanes * LANE_H + ROW_PAD; }
    totalHeight = y;
    layout();
  }

  // -- geometry ---------------------------------------------------------------------------------------------
  function span() { return Math.max(1, data.end - data.start); }
  function timeWidth() { return Math.max(200, scroller.clientWidth - LABEL_W) * ZOOMS[zoomIndex]; }
  function pxPerSecond() { return timeWidth() / span(); }
  function xOf(seconds) { return LABEL_W + seconds * pxPerSecond() - scroller.scrollLeft; }

  function layout() {
    // the height first: the vertical scroll bar it brings narrows the width the time axis gets
    sizer.style.height = Math.max(scroller.clientHeight, AXIS_H + totalHeight) + "px";
    var dpr = window.devicePixelRatio || 1, w = scroller.clientWidth, h = scroller.clientHeight;
    sizer.style.width = (LABEL_W + timeWidth()) + "px";
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    zoomText.textContent = ZOOMS[zoomIndex] + "×";
    draw();
  }

  function firstRowAt(y) {   // the first shown row whose bottom is below y (rows' own coordinates)
    var lo = 0, hi = shown.length;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (tops[mid] + shown[mid].lanes * LANE_H + ROW_PAD <= y) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  // -- drawing ----------------------------------------------------------------------------------------------
  function request() {
    if (!pending) { pending = true; window.requestAnimationFrame(function () { pending = false; draw(); }); }
  }

  function contrast(hex) {
    var v = parseInt(hex.slice(1), 16), r = (v >> 16) & 255, g = (v >> 8) & 255, b = v & 255;
    return (0.299 * r + 0.587 * g + 0.114 * b) > 150 ? "#111111" : "#ffffff";
  }

  function pattern(kind) {   // the texture that tells a kind apart without its colour
    if (kind in patterns) return patterns[kind];
    var tile = document.createElement("canvas"), c;
    tile.width = tile.height = 8;
    c = tile.getContext("2d");
    c.strokeStyle = c.fillStyle = "rgba(255,255,255,0.55)";
    c.lineWidth = 1.5;
    if (kind === "suspend") { c.beginPath(); c.moveTo(0, 8); c.lineTo(8, 0); c.stroke(); }
    else if (kind === "resume") { c.beginPath(); c.moveTo(0, 0); c.lineTo(8, 8); c.stroke(); }
    else if (kind === "migrate") { c.beginPath(); c.moveTo(0, 8); c.lineTo(8, 0); c.moveTo(0, 0); c.lineTo(8, 8); c.stroke(); }
    else if (kind === "live-migrate") { c.beginPath(); c.arc(4, 4, 1.6, 0, 2 * Math.PI); c.fill(); }
    else if (kind === "shutdown") { c.fillRect(3, 0, 2, 8); }
    else { patterns[kind] = null; return null; }
    patterns[kind] = ctx.createPattern(tile, "repeat");
    return patterns[kind];
  }

  function fillBar(c, kind, colour, x, y, w, h) {
    c.fillStyle = colour;
    c.fillRect(x, y, w, h);
    var p = pattern(kind);
    if (p) { c.fillStyle = p; c.fillRect(x, y, w, h); }
  }

  function draw() {
    if (!data) return;
    var w = scroller.clientWidth, h = scroller.clientHeight, sy = scroller.scrollTop, pps = pxPerSecond();
    ctx.clearRect(0, 0, w, h);
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    var ticks = tickList(pps);
    var first = firstRowAt(sy), bottom = sy + h - AXIS_H;
    var tmin = (scroller.scrollLeft) / pps, tmax = (scroller.scrollLeft + w - LABEL_W) / pps;
    for (var i = first; i < shown.length && tops[i] < bottom; i++) {
      var row = shown[i], y0 = AXIS_H + tops[i] - sy, rh = row.lanes * LANE_H + ROW_PAD;
      ctx.fillStyle = i % 2 ? "#f7f8fa" : "#ffffff";
      ctx.fillRect(LABEL_W, y0, w - LABEL_W, rh);
      if (row.silent !== null) { ctx.fillStyle = "#f6d3d3"; var sx0 = Math.max(LABEL_W, xOf(row.silent)); ctx.fillRect(sx0, y0, w - sx0, rh); }
      if (row.drained !== null) hatch(Math.max(LABEL_W, xOf(row.drained)), y0, w, rh);
      ticks.forEach(function (t) {
        var x = Math.round(xOf(t.at)) + 0.5;
        if (x < LABEL_W || x > w) return;
        ctx.strokeStyle = t.major ? "#c9ced6" : "#e6e9ee";
        ctx.beginPath(); ctx.moveTo(x, y0); ctx.lineTo(x, y0 + rh); ctx.stroke();
      });
      row.bars.forEach(function (b) {
        if (startOf[b] > tmax + 1 || endOf[b] < tmin - 1 || !visibleBar(b)) return;
        drawBar(b, y0, pps, w);
      });
      ctx.strokeStyle = "#e0e3e8";
      ctx.beginPath(); ctx.moveTo(0, y0 + rh - 0.5); ctx.lineTo(w, y0 + rh - 0.5); ctx.stroke();
      drawLabel(row, y0, rh);
    }
    drawNow(h);
    drawAxis(ticks, w);
  }

  function hatch(x, y, w, h) {
    ctx.save();
    ctx.beginPath(); ctx.rect(x, y, w - x, h); ctx.clip();
    ctx.fillStyle = "#eef0f3"; ctx.fillRect(x, y, w - x, h);
    ctx.strokeStyle = "#9aa3ad"; ctx.lineWidth = 2;
    ctx.beginPath();
    for (var k = x - h; k < w; k += 8) { ctx.moveTo(k, y + h); ctx.lineTo(k + h, y); }
    ctx.stroke();
    ctx.restore();
  }

  function drawBar(b, y0, pps, w) {
    var kind = data.kinds[kindOf[b]], x = xOf(startOf[b]), bw = (endOf[b] - startOf[b]) * pps;
    var y = y0 + 2 + laneOf[b] * LANE_H, bh = LANE_H - 3, info = lease(b);
    ctx.globalAlpha = data.states[stateOf[b]] === "done" ? 0.45 : 1;
    if (bw <= 0) {   // a zero-length reservation: a tick with a notch on top
      ctx.fillStyle = kind[2];
      ctx.fillRect(Math.round(x) - 1, y + 3, 2, bh - 3);
      ctx.beginPath(); ctx.moveTo(x - 3, y); ctx.lineTo(x + 3, y); ctx.lineTo(x, y + 4); ctx.fill();
    } else {
      bw = Math.max(MIN_BAR_PX, bw);
      fillBar(ctx, kind[0], kind[2], x, y, bw, bh);
      if (bw > 34) {
        var text = "#" + info[0] + (info[1] ? " " + info[1] : "") + " · " + (info[2] || "nobody");
        ctx.save();
        ctx.beginPath(); ctx.rect(Math.max(x, LABEL_W) + 3, y, bw - 6, bh); ctx.clip();
        ctx.fillStyle = contrast(kind[2]);
        ctx.fillText(text, Math.max(x, LABEL_W) + 4, y + bh / 2 + 0.5);
        ctx.restore();
      }
    }
    ctx.globalAlpha = 1;
    if (info[2] === data.me) { ctx.strokeStyle = "#111111"; ctx.lineWidth = 2; ctx.strokeRect(x + 1, y + 1, Math.max(bw, 2) - 2, bh - 2); }
    if (b === selected) { ctx.strokeStyle = "#f0a500"; ctx.lineWidth = 3; ctx.strokeRect(x - 2, y - 2, Math.max(bw, 2) + 4, bh + 4); }
    ctx.lineWidth = 1;
  }

  function drawLabel(row, y0, rh) {
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, y0, LABEL_W, rh);
    ctx.fillStyle = "#1b1f24";
    var y = y0 + Math.min(rh, LANE_H + ROW_PAD) / 2, name = row.name, tag = "";
    if (row.silent !== null) tag = "down"; else if (row.drained !== null) tag = "drained";
    var room = LABEL_W - 10 - (tag ? ctx.measureText(tag).width + 10 : 0);
    while (name.length > 3 && ctx.measureText(name).width > room) name = name.slice(0, -2) + "…";
    ctx.fillText(name, 6, y);
    if (tag) {
      var tw = ctx.measureText(tag).width, tx = LABEL_W - tw - 8;
      ctx.fillStyle = tag === "down" ? "#a61b1b" : "#7a4a00";
      ctx.fillRect(tx - 3, y - 8, tw + 6, 16);
      ctx.fillStyle = "#ffffff";
      ctx.fillText(tag, tx, y);
    }
    ctx.strokeStyle = "#c9ced6";
    ctx.beginPath(); ctx.moveTo(LABEL_W - 0.5, y0); ctx.lineTo(LABEL_W - 0.5, y0 + rh); ctx.stroke();
  }

  function tickList(pps) {
    var need = 96 / pps, step = STEPS[STEPS.length - 1];
    for (var i = 0; i < STEPS.length; i++) if (STEPS[i] >= need) { step = STEPS[i]; break; }
    var out = [], t;
    if (step >= 86400) {   // whole days from the window's start (a week starts on Monday, a month on the 1st)
      for (t = 0; t <= span(); t += step) out.push({ at: t, major: true, step: step });
    } else {
      var abs = Math.ceil(data.start / step) * step;
      for (t = abs - data.start; t <= span(); t += step) out.push({ at: t, major: (data.start + t) % 86400 === 0, step: step });
    }
    return out;
  }

  function two(n) { return (n < 10 ? "0" : "") + n; }
  function dayText(d) { return DAYS[d.getUTCDay()] + " " + two(d.getUTCDate()) + " " + MONTHS[d.getUTCMonth()]; }
  function timeText(seconds) {
    var d = new Date((data.start + seconds) * 1000);
    return d.getUTCFullYear() + "-" + two(d.getUTCMonth() + 1) + "-" + two(d.getUTCDate()) + " " +
      two(d.getUTCHours()) + ":" + two(d.getUTCMinutes()) + (d.getUTCSeconds() ? ":" + two(d.getUTCSeconds()) : "");
  }

  function drawAxis(ticks, w) {
    ctx.fillStyle = "#f3f5f8";
    ctx.fillRect(0, 0, w, AXIS_H);
    ctx.strokeStyle = "#9aa3ad";
    ctx.beginPath(); ctx.moveTo(0, AXIS_H - 0.5); ctx.lineTo(w, AXIS_H - 0.5); ctx.stroke();
    ticks.forEach(function (t) {
      var x = Math.round(xOf(t.at)) + 0.5;
      if (x < LABEL_W - 1 || x > w + 80) return;
      var d = new Date((data.start + t.at) * 1000);
      ctx.strokeStyle = "#6b7584";
      ctx.beginPath(); ctx.moveTo(x, AXIS_H - (t.major ? 14 : 8)); ctx.lineTo(x, AXIS_H); ctx.stroke();
      ctx.fillStyle = "#1b1f24";
      ctx.font = (t.major ? "bold " : "") + "12px system-ui, sans-serif";
      var text = t.step >= 86400 || t.major ? dayText(d) : two(d.getUTCHours()) + ":" + two(d.getUTCMinutes());
      ctx.fillText(text, x + 3, AXIS_H - 20);
    });
    ctx.font = "12px system-ui, sans-serif";
    ctx.fillStyle = "#f3f5f8";
    ctx.fillRect(0, 0, LABEL_W, AXIS_H);
    ctx.fillStyle = "#4a5360";
    ctx.fillText("host · time (UTC)", 6, AXIS_H / 2);
    var nx = xOf(data.now - data.start);
    if (nx >= LABEL_W && nx <= w) {
      ctx.fillStyle = "#d0021b";
      ctx.beginPath(); ctx.moveTo(nx - 6, AXIS_H - 12); ctx.lineTo(nx + 6, AXIS_H - 12); ctx.lineTo(nx, AXIS_H); ctx.fill();
      ctx.font = "bold 11px system-ui, sans-serif";
      ctx.fillText("now", nx + 8, AXIS_H - 8);
      ctx.font = "12px system-ui, sans-serif";
    }
  }

  function drawNow(h) {
    var x = Math.round(xOf(data.now - data.start)) + 0.5;
    if (x < LABEL_W || x > scroller.clientWidth) return;
    ctx.strokeStyle = "#d0021b"; ctx.lineWidth = 2;
    ctx.beginPath(); ctx.moveTo(x, AXIS_H); ctx.lineTo(x, h); ctx.stroke();
    ctx.lineWidth = 1;
  }

  function drawLegend() {
    var swatches = document.querySelectorAll("canvas.swatch");
    Array.prototype.forEach.call(swatches, function (sw) {
      var kind = data.kinds.filter(function (k) { return k[0] === sw.dataset.kind; })[0];
      if (!kind) return;
      var c = sw.getContext("2d");
      c.fillStyle = kind[2]; c.fillRect(0, 0, sw.width, sw.height);
      var p = pattern(kind[0]);
      if (p) { c.fillStyle = p; c.fillRect(0, 0, sw.width, sw.height); }
    });
  }

  // -- finding what is under the pointer, and saying what it is ------------------------------------------------
  function barAt(mx, my) {
    if (mx < LABEL_W || my < AXIS_H) return -1;
    var y = my - AXIS_H + scroller.scrollTop, i = firstRowAt(y);
    if (i >= shown.length || tops[i] > y) return -1;
    var lane = Math.floor((y - tops[i] - 2) / LANE_H), pps = pxPerSecond();
    var t = (mx - LABEL_W + scroller.scrollLeft) / pps, slack = 4 / pps, best = -1;
    shown[i].bars.forEach(function (b) {
      if (laneOf[b] !== lane || !visibleBar(b)) return;
      var end = Math.max(endOf[b], startOf[b] + MIN_BAR_PX / pps);
      if (t >= startOf[b] - slack && t <= end + slack && (best < 0 || Math.abs(t - startOf[b]) < Math.abs(t - startOf[best]))) best = b;
    });
    return best;
  }

  function describe(b) {
    var info = lease(b), kind = data.kinds[kindOf[b]], role = data.roles[roleOf[b]];
    return "lease " + info[0] + (info[1] ? " " + info[1] : "") + " of " + (info[2] || "nobody") + ": " + kind[1] +
      " on " + data.hosts[hostOf[b]][0] + (role ? " (" + role + ")" : "") + ", " + timeText(startOf[b]) +
      (endOf[b] > startOf[b] ? " → " + timeText(endOf[b]) : "") + " UTC, " + data.states[stateOf[b]] +
      "; " + info[3] + ", lease " + info[4];
  }

  function open(b) { window.location.href = "/leases/" + lease(b)[0]; }

  function rowIndexOf(b) {
    for (var i = 0; i < shown.length; i++) if (shown[i].index === hostOf[b]) return i;
    return -1;
  }

  function select(b) {
    selected = b;
    if (b < 0) return;
    var i = rowIndexOf(b), pps = pxPerSecond();
    var y = tops[i] + laneOf[b] * LANE_H, x = startOf[b] * pps;
    var viewH = scroller.clientHeight - AXIS_H, viewW = scroller.clientWidth - LABEL_W;
    if (y < scroller.scrollTop || y + LANE_H > scroller.scrollTop + viewH) scroller.scrollTop = Math.max(0, y - viewH / 3);
    if (x < scroller.scrollLeft || x > scroller.scrollLeft + viewW - 20) scroller.scrollLeft = Math.max(0, x - viewW / 4);
    status.textContent = describe(b);
    draw();
  }

  function step(key) {
    var i, row, list, pos;
    if (selected < 0 || rowIndexOf(selected) < 0) {
      for (i = firstRowAt(scroller.scrollTop); i < shown.length; i++) {
        list = shown[i].bars.filter(visibleBar);
        if (list.length) return select(list[0]);
      }
      return;
    }
    i = rowIndexOf(selected);
    row = shown[i];
    list = row.bars.filter(visibleBar);
    pos = list.indexOf(selected);
    if (key === "ArrowRight" && pos + 1 < list.length) return select(list[pos + 1]);
    if (key === "ArrowLeft" && pos > 0) return select(list[pos - 1]);
    if (key === "Home") return select(list[0]);
    if (key === "End") return select(list[list.length - 1]);
    if (key === "ArrowDown" || key === "ArrowUp") {
      for (var j = key === "ArrowDown" ? i + 1 : i - 1; j >= 0 && j < shown.length; j += key === "ArrowDown" ? 1 : -1) {
        var other = shown[j].bars.filter(visibleBar);
        if (!other.length) continue;
        var at = startOf[selected], best = other[0];
        other.forEach(function (b) { if (Math.abs(startOf[b] - at) < Math.abs(startOf[best] - at)) best = b; });
        return select(best);
      }
    }
  }

  // -- zoom, moving in time, filters ---------------------------------------------------------------------------
  function zoom(to, focusX) {
    to = Math.max(0, Math.min(ZOOMS.length - 1, to));
    if (to === zoomIndex) return;
    var fx = focusX === undefined ? LABEL_W + (scroller.clientWidth - LABEL_W) / 2 : Math.max(LABEL_W, focusX);
    var t = (fx - LABEL_W + scroller.scrollLeft) / pxPerSecond();
    zoomIndex = to;
    layout();
    scroller.scrollLeft = Math.max(0, t * pxPerSecond() - (fx - LABEL_W));
    draw();
  }

  function go(href) {
    var url = new URL(href, window.location.href);
    fetch("/calendar.json" + url.search, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (answer) {
        if (!answer.ok) throw new Error(answer.status);
        return answer.json();
      })
      .then(function (next) {
        zoomIndex = 0;
        scroller.scrollLeft = 0;
        load(next);
        links();
        history.replaceState(null, "", "/calendar?view=" + next.view + "&date=" + next.date);
        status.textContent = "showing " + next.title;
      })
      .catch(function () { window.location.href = href; });
  }

  function links() {
    document.getElementById("cal-title").textContent = data.title + " (UTC)";
    var bar = document.getElementById("cal-toolbar");
    Array.prototype.forEach.call(bar.querySelectorAll("a[data-view]"), function (a) {
      a.href = "/calendar?view=" + a.dataset.view + "&date=" + data.date;
      if (a.dataset.view === data.view) a.setAttribute("aria-current", "true"); else a.removeAttribute("aria-current");
    });
    bar.querySelector("a[data-go=previous]").href = "/calendar?view=" + data.view + "&date=" + data.previous;
    bar.querySelector("a[data-go=next]").href = "/calendar?view=" + data.view + "&date=" + data.next;
    bar.querySelector("a[data-go=today]").href = "/calendar?view=" + data.view;
  }

  // -- what scripts may ask ------------------------------------------------------------------------------------
  function summary() {
    var ids = data.leases.map(function (l) { return l[0]; });
    return {
      view: data.view, title: data.title, start: data.start, end: data.end, bars: hostOf.length, leases: ids,
      hosts: data.hosts.map(function (h) { return h[0]; }),
      shown: shown.map(function (r) { return r.name; }),
      drained: data.hosts.filter(function (h) { return h[3] !== null; }).map(function (h) { return h[0]; }),
      down: data.hosts.filter(function (h) { return h[4] !== null; }).map(function (h) { return h[0]; })
    };
  }

  function reveal(leaseId) {   // select the lease's first bar, scroll to it; its box on the screen
    for (var b = 0; b < hostOf.length; b++) {
      if (lease(b)[0] !== leaseId || !visibleBar(b) || rowIndexOf(b) < 0) continue;
      select(b);
      var box = canvas.getBoundingClientRect(), pps = pxPerSecond(), i = rowIndexOf(b);
      var x = xOf(startOf[b]), w = Math.max(MIN_BAR_PX, (endOf[b] - startOf[b]) * pps);
      var y = AXIS_H + tops[i] - scroller.scrollTop + 2 + laneOf[b] * LANE_H;
      return { x: box.left + Math.max(x, LABEL_W), y: box.top + y, width: Math.min(w, scroller.clientWidth - Math.max(x, LABEL_W)), height: LANE_H - 3 };
    }
    return null;
  }

  // -- wiring ------------------------------------------------------------------------------------------------
  function start() {
    scroller = document.getElementById("cal-scroll");
    sizer = document.getElementById("cal-size");
    canvas = document.getElementById("cal-canvas");
    tip = document.getElementById("cal-tip");
    status = document.getElementById("cal-status");
    zoomText = document.getElementById("cal-zoom");
    ctx = canvas.getContext("2d");
    load(JSON.parse(document.getElementById("calendar-data").textContent));
    drawLegend();

    scroller.addEventListener("scroll", request, { passive: true });
    window.addEventListener("resize", layout);
    canvas.addEventListener("mousemove", function (e) {
      var b = barAt(e.offsetX, e.offsetY);
      canvas.style.cursor = b >= 0 ? "pointer" : "default";
      if (b < 0) { tip.hidden = true; return; }
      tip.textContent = describe(b).replace(": ", "\n").replace("; ", "\n");
      tip.style.left = Math.min(e.clientX + 14, window.innerWidth - 320) + "px";
      tip.style.top = (e.clientY + 16) + "px";
      tip.hidden = false;
    });
    canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
    canvas.addEventListener("click", function (e) {
      var b = barAt(e.offsetX, e.offsetY);
      if (b >= 0) open(b);
    });
    scroller.addEventListener("wheel", function (e) {
      if (!e.ctrlKey) return;
      e.preventDefault();
      var box = canvas.getBoundingClientRect();
      zoom(zoomIndex + (e.deltaY < 0 ? 1 : -1), e.clientX - box.left);
    }, { passive: false });
    scroller.addEventListener("keydown", function (e) {
      if (["ArrowRight", "ArrowLeft", "ArrowUp", "ArrowDown", "Home", "End"].indexOf(e.key) >= 0) {
        e.preventDefault();
        step(e.key);
      } else if (e.key === "Enter" && selected >= 0) {
        open(selected);
      } else if (e.key === "+" || e.key === "=") {
        zoom(zoomIndex + 1);
      } else if (e.key === "-") {
        zoom(zoomIndex - 1);
      }
    });
    document.querySelectorAll("[data-zoom]").forEach(function (button) {
      button.addEventListener("click", function () { zoom(zoomIndex + (button.dataset.zoom === "in" ? 1 : -1)); });
    });
    document.querySelectorAll("#cal-toolbar a[data-view], #cal-toolbar a[data-go]").forEach(function (a) {
      a.addEventListener("click", function (e) {
        if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
        e.preventDefault();
        go(a.href);
      });
    });
    document.getElementById("cal-hosts").addEventListener("input", function (e) { filterText = e.target.value; filter(); });
    document.getElementById("cal-mine").addEventListener("change", function (e) { mineOnly = e.target.checked; draw(); });
    // (drawnAt: when the first drawing was done, in ms from the page's navigation: its first render)
    window.leasewiseCalendar = { summary: summary, reveal: reveal, drawnAt: performance.now() };
    document.documentElement.dataset.calendar = "drawn";
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
