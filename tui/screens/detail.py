"""The detail view of one GPU: history plots over a chosen window, and its processes.

Plots redraw only while this screen is the one on show, and at most once per new
sample (or when the window, size or theme changes). While paused nothing moves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import Static

from gpumon.backends.model import GpuHistory, GpuProcess, GpuSample, Health, HostSample
from gpumon.backends.monitor import HostMonitor
from gpumon.tui.views import Palette, rgb
from gpumon.tui.views.gpu_cells import (
    Cell,
    GpuCells,
    Role,
    duration,
    gpu_cells,
    health_facts_cell,
    memory_role,
    mig_cells,
    short_name,
    temperature_role,
)
from gpumon.tui.views.plot_text import plot_title, window_range
from gpumon.tui.views.process_cells import ProcessKey, memory_flag, process_key, process_line
from gpumon.tui.views.process_table import (
    SHARE_NOTE,
    display_order,
    next_sort,
    table_lines,
)
from gpumon.tui.widgets import KeyFooter, PlotSpec, PlotWidget, series
from gpumon.tui.widgets.plot import RGB

WINDOWS = {"1": 60.0, "2": 600.0, "3": 3600.0}
WIDE_TABLE = 110  # from this width the process table shows host PID, CPU and RSS too
WINDOW_NAMES = {60.0: "1 min", 600.0: "10 min", 3600.0: "1 h"}


def fitting_window(history_s: float) -> float:
    """The shortest plot window that holds ``history_s`` seconds of history (the longest
    when none does): a dashboard 40 s old opens on 1 min, not on a 10 min plot that is
    nine-tenths empty."""
    return next((w for w in sorted(WINDOW_NAMES) if history_s <= w), max(WINDOW_NAMES))


@dataclass(frozen=True, slots=True)
class DetailTarget:
    """The GPU on show: which monitor, which GPU index."""

    monitor: HostMonitor
    gpu_index: int


class DetailScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("1", "window(60)", "Window", key_display="1-3", tooltip="Plot the last minute"),
        Binding("2", "window(600)", "10 min", show=False, tooltip="Plot the last 10 minutes"),
        Binding("3", "window(3600)", "1 h", show=False, tooltip="Plot the last hour"),
        Binding(
            "tab",
            "select_process(1)",
            "Process",
            key_display="tab",
            show=False,
            tooltip="Select the next process (K terminates it)",
        ),
        Binding(
            "shift+tab",
            "select_process(-1)",
            "Previous process",
            show=False,
            tooltip="Select the previous process",
        ),
        Binding(
            "o",
            "sort_processes",
            "Sort",
            tooltip="Sort the processes by the next column (SM, bandwidth, memory, CPU, ...)",
        ),
        Binding("T", "toggle_tree", "Tree", tooltip="Show launchers and their workers"),
        Binding(
            "e",
            "environment",
            "Env",
            tooltip="Read the selected process's environment (CUDA_VISIBLE_DEVICES, NCCL_*)",
        ),
    ]

    def __init__(
        self,
        target: DetailTarget,
        *,
        sample_of: Callable[[HostMonitor], HostSample | None],
        palette_of: Callable[[], Palette],
        window: float = 600.0,
        on_window: Callable[[float], None] | None = None,
    ) -> None:
        """``sample_of(monitor)`` is the sample the dashboard shows (frozen while paused);
        ``palette_of()`` the current theme's colours; ``on_window(seconds)`` hears of a
        window the user chose (the dashboard remembers it)."""
        super().__init__()
        self.target = target
        self.window = window
        self.on_window = on_window
        self.sample_of = sample_of
        self.palette_of = palette_of
        self.title_line = Static(id="detail-title", markup=False)
        self.plots = {
            name: PlotWidget(id=f"plot-{name}") for name in ("memory", "util", "temp", "power")
        }
        self.processes = Static(id="detail-processes", markup=False)
        self.selected = 0  # the process under the process cursor (K acts on it)
        self.sort = "sm"  # the column the processes are sorted by (``o``)
        self.nested = False  # launchers and their workers (``T``)
        # the selected process's environment once asked for (``e``): its key and lines
        self.environment: tuple[ProcessKey, list[str]] | None = None
        self.read_environment: Callable[[GpuProcess], Awaitable[list[str]]] | None = None
        self.can_kill: Callable[[], bool] = lambda: False  # whether K may act here
        self._text_key: tuple[object, ...] | None = None
        self._plot_key: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        yield self.title_line
        with Grid(id="detail-plots"):
            yield from self.plots.values()
        yield self.processes
        yield KeyFooter()

    def action_window(self, seconds: float) -> None:
        self.window = float(seconds)
        if self.on_window is not None:
            self.on_window(self.window)
        self.refresh_bindings()
        self.refresh_view()

    def show_gpu(self, target: DetailTarget) -> None:
        """Follow the cursor to another GPU."""
        self.target = target
        self.selected = 0
        self.refresh_view()

    def action_select_process(self, delta: int) -> None:
        count = len(self._processes())
        if count:
            self.selected = (self.selected + delta) % count
            self._text_key = None
            self.refresh_view()

    def select(self, process: GpuProcess) -> None:
        """Put the process cursor on ``process`` (as the dashboard had it selected)."""
        procs = self._processes()
        if process in procs:
            self.selected = procs.index(process)
            self._text_key = None

    def action_sort_processes(self) -> None:
        keep = self.selected_process()
        self.sort = next_sort(self.sort)
        self._follow(keep)

    def action_toggle_tree(self) -> None:
        keep = self.selected_process()
        self.nested = not self.nested
        self._follow(keep)

    async def action_environment(self) -> None:
        """The selected process's environment, read now (never before it is asked for),
        scrubbed; ``e`` again hides it."""
        p = self.selected_process()
        if p is None or self.read_environment is None:
            return
        if self.environment is not None and self.environment[0] == process_key(p):
            self.environment = None
        else:
            self.environment = (process_key(p), ["reading the environment…"])
            self._redraw()
            self.environment = (process_key(p), await self.read_environment(p))
        self._redraw()

    def _follow(self, keep: GpuProcess | None) -> None:
        procs = self._processes()
        if keep in procs:
            self.selected = procs.index(keep)
        self._redraw()

    def _redraw(self) -> None:
        self._text_key = None
        self.refresh_view()

    def _processes(self) -> tuple[GpuProcess, ...]:
        """The GPU's processes in the order the table shows them."""
        sample = self.sample_of(self.target.monitor)
        gpu = _gpu(sample, self.target.gpu_index)
        if gpu is None or sample is None:
            return ()
        return tuple(display_order(sample.processes_for(gpu), self.sort, self.nested))

    def selected_process(self) -> GpuProcess | None:
        """The process under the process cursor (None: no processes on this GPU)."""
        procs = self._processes()
        return procs[min(self.selected, len(procs) - 1)] if procs else None

    def on_resize(self) -> None:
        self.call_after_refresh(self.refresh_view)

    def refresh_view(self) -> bool:
        """Bring the view up to date; returns whether the plots were redrawn now."""
        if not self.is_current:
            return False
        m, idx = self.target.monitor, self.target.gpu_index
        sample = self.sample_of(m)
        pal = self.palette_of()
        gpu = _gpu(sample, idx)
        age = None if sample is None or not m.is_stale() else m.age_s(sample)
        stale = None if age is None else duration(age)
        text_key = (id(m), idx, id(sample), stale, self.window, pal, self.selected, self.size)
        if text_key != self._text_key:
            self._text_key = text_key
            lines = (self.title_line.render(), self.processes.render())
            self.title_line.update(self._title(gpu, sample, stale, pal))
            self.processes.update(self._process_table(gpu, sample, pal))
            if (self.title_line.render(), self.processes.render()) != lines:
                # The text may take more or fewer lines: draw the plots at their new size.
                self.call_after_refresh(self._update_plots)
                return False
        return self._update_plots()

    def _update_plots(self) -> bool:
        m, idx = self.target.monitor, self.target.gpu_index
        sample = self.sample_of(m)
        pal = self.palette_of()
        sizes = tuple(p.size for p in self.plots.values())
        plot_key = (id(m), idx, sample.time if sample else None, self.window, pal, sizes)
        if plot_key == self._plot_key or not self.is_current:
            return False
        self._plot_key = plot_key
        self.redraw_plots(_gpu(sample, idx), sample, pal)
        return True

    def redraw_plots(self, gpu: GpuSample | None, sample: HostSample | None, pal: Palette) -> None:
        m = self.target.monitor
        hist = m.histories.get(self.target.gpu_index)
        end = sample.time if sample else m.clock()
        frame = rgb(pal.na)
        total = gpu.memory_total_mib if gpu and gpu.memory_total_mib else None
        limit = gpu.power_limit_w if gpu and gpu.power_limit_w else None
        specs = {
            "memory": ("memory GiB", 1 / 1024, (total or 0) / 1024, False, 1),
            "util": ("utilisation %", 1.0, 100.0, True, 0),
            "temp": ("temperature °C", 1.0, 100.0, False, 0),
            "power": ("power W", 1.0, limit or 0.0, True, 0),
        }
        levels, y_min = self._memory_levels(total, hist, end, pal)
        for name, (label, scale, y_max, mean, digits) in specs.items():
            plot = self.plots[name]
            title = label
            if hist is None:
                values: tuple[float | None, ...] = ()
                xs: tuple[float, ...] = ()
                gap = 3.0
            else:
                # the numbers beside the plot: a few rows cannot tell 86 from 96 GiB
                field = getattr(hist, _FIELDS[name])
                numbers = window_range(hist.times, field, end=end, window=self.window)
                title = plot_title(label, numbers, scale=scale, digits=digits)
                xs, values, gap = series(
                    hist.times,
                    field,
                    end=end,
                    window=self.window,
                    max_points=max(plot.size.width * 2, 20),
                    interval=m.interval,
                    mean=mean,
                    scale=scale,
                )
            colour = rgb(pal.colour(self._role(name, gpu, sample)))
            spec = PlotSpec(title, xs, values, self.window, y_max, colour, frame, gap)
            if name == "memory":
                spec = replace(spec, levels=levels, y_min=y_min)
            plot.show(spec)

    def _memory_levels(
        self, total_mib: int | None, hist: GpuHistory | None, end: float, pal: Palette
    ) -> tuple[tuple[tuple[float, RGB], ...], float]:
        """The memory plot's capacity and warning lines (GiB) and the bottom of its axis:
        zoomed in so a ramp of a few GiB towards full is visible (from 0 when usage is low).
        """
        if not total_mib:
            return (), 0.0
        rules = self.target.monitor.alerts.rules
        warn_mib = total_mib * rules.memory_warning_pct / 100.0
        if rules.memory_warning_free_gib > 0:
            warn_mib = min(warn_mib, total_mib - rules.memory_warning_free_gib * 1024)
        levels = ((total_mib / 1024, rgb(pal.critical)), (warn_mib / 1024, rgb(pal.warning)))
        # the lowest known value since the window's start: walked back from the newest
        # sample and stopped at the window's start, as the plot's own points are (a 1 min
        # window reads 60 samples of an hour's 3,600, not all of them)
        start = end - self.window
        low = warn_mib
        if hist:
            for t, v in zip(reversed(hist.times), reversed(hist.memory_used_mib), strict=True):
                if t < start:
                    break
                if v is not None and v < low:
                    low = v
        span = total_mib - low
        return levels, max(0.0, (low - span) / 1024)

    def _memory_level(self, gpu: GpuSample, sample: HostSample | None) -> Health | None:
        """The memory level the host's alerts give ``gpu`` of ``sample``."""
        at = sample.time if sample is not None else self.target.monitor.clock()
        return self.target.monitor.alerts.memory_level(gpu, at)

    def _role(self, name: str, gpu: GpuSample | None, sample: HostSample | None) -> Role:
        """The colour of plot ``name``: memory as its alert, temperature by its level."""
        if gpu is None:
            return Role.NA
        if name == "memory":
            return memory_role(self._memory_level(gpu, sample))
        if name == "temp":
            return temperature_role(gpu.temperature_c)
        return Role.OK

    def _title(
        self, gpu: GpuSample | None, sample: HostSample | None, stale: str | None, pal: Palette
    ) -> Text:
        m = self.target.monitor
        text = Text()
        text.append(f" {m.name} ", Style(bold=True, color=pal.accent))
        text.append(f"GPU {self.target.gpu_index}", Style(bold=True))
        if gpu is None:
            text.append("  no data for this GPU", pal.text(Role.NA))
            return text
        c = gpu_cells(gpu, self._memory_level(gpu, sample))
        width = self.size.width or self.app.size.width
        bus = gpu.bus_id or ""
        # on a narrow screen the bus id goes up beside the short name, so the values' line
        # does not wrap and the plots keep their rows (80x24)
        bus_above = len(_values_line(c)) + 2 + len(bus) > width
        name = short_name(gpu.name) if bus_above else gpu.name or "n/a"
        text.append(f"  {name}", Style(bold=True))
        if bus_above and bus:
            text.append(f"  {bus}", pal.text(Role.MUTED))
        text.append(f"  window {WINDOW_NAMES.get(self.window, duration(self.window))}")
        if stale is not None:
            text.append("  ")
            text.append(f" stale {stale} ", pal.badge(Role.CRITICAL))
        line2 = Text(" ")
        for label, cell in _values(c):
            if label:
                line2.append(f"{label} ", pal.text(Role.MUTED))
            line2.append(cell.text, pal.text(cell.role))
            line2.append("  ")
        if not bus_above:
            line2.append(bus, pal.text(Role.MUTED))
        if c.problems.text:
            line2.append(f"  {c.marker.text} {c.problems.text}", pal.text(c.problems.role))
        facts = health_facts_cell(gpu)
        line3 = Text(f" {facts.text}", pal.text(facts.role))
        return Text("\n").join([text, line2, line3])

    def _process_table(
        self, gpu: GpuSample | None, sample: HostSample | None, pal: Palette
    ) -> Text:
        width = max(self.size.width or self.app.size.width, 40)
        wide = width >= WIDE_TABLE
        watched = self.target.monitor.host.container
        procs = () if gpu is None or sample is None else sample.processes_for(gpu)
        chosen = self.selected_process()
        found = table_lines(
            procs, watched, width=width, wide=wide, sort=self.sort, tree=self.nested,
            selected=chosen,
        )  # fmt: skip
        lines = [Text(found[0].text, Style(bold=True, color=pal.na))]
        if gpu is None or sample is None:
            return Text("\n").join([*lines, Text("  no data", pal.text(Role.NA))])
        rules = self.target.monitor.alerts.rules
        # a GPU in MIG mode: its instances first, each with its own memory and processes
        for x in mig_cells(sample, gpu, rules.memory_warning_pct, rules.memory_critical_pct):
            lines.append(Text(f"  {x.text}", pal.text(x.role)))
        if not procs:
            lines.append(Text("  no compute processes", pal.text(Role.MUTED)))
        for line in found[1:]:
            text = Text(line.text, pal.text(line.role))
            if line.process is not None and line.process is chosen:
                text.stylize(Style(bold=True))
            lines.append(text)
        flag = memory_flag(sample, gpu, watched)
        if flag is not None:
            lines.append(Text(f"  {flag.text}", pal.text(flag.role)))
        if any(p.sm_pct is not None for p in procs):
            lines.append(Text(f"  {SHARE_NOTE}", pal.text(Role.MUTED)))
        env = self.environment
        if chosen is not None and env is not None and env[0] == process_key(chosen):
            said = Text(f"  environment of {process_line(chosen, watched).pid}: ", Style(bold=True))
            said.append("  ".join(env[1]), pal.text(Role.NORMAL))  # wraps: the pane is short
            lines.append(said)
        if procs:
            hint = "o: sort  T: tree  e: environment"
            if len(procs) > 1 or self.can_kill():
                hint = "tab: next process  " + hint
            if self.can_kill():
                hint += "  K: terminate it"
            lines.append(Text(f"  {hint}", pal.text(Role.MUTED)))
        return Text("\n").join(lines)


_FIELDS = {
    "memory": "memory_used_mib",
    "util": "utilization_pct",
    "temp": "temperature_c",
    "power": "power_w",
}


def _values(c: GpuCells) -> tuple[tuple[str, Cell], ...]:
    """The values the title's second line says, with their labels."""
    return (
        ("mem", c.memory),
        ("", c.memory_pct),
        ("util", c.util),
        ("temp", c.temp),
        ("power", c.power),
        ("", c.pstate),
    )


def _values_line(c: GpuCells) -> str:
    """The title's second line without the bus id: " mem 82.5/95.6GiB  86%  ...  P0  "."""
    return " " + "".join(f"{label} " * bool(label) + cell.text + "  " for label, cell in _values(c))


def _gpu(sample: HostSample | None, index: int) -> GpuSample | None:
    if sample is None:
        return None
    return next((g for g in sample.gpus if g.index == index), None)
