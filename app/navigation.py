"""The studio's pages, declared once: the router (app/server/studio.py, which app/main.py
runs) builds its navigation from this list and tests/test_app_pages.py renders every page
in it, so a page added here is routed and tested with no other edit."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PageSpec:
    """A page: its script's file name, its title in the sidebar, its Material icon."""

    file: str
    title: str
    icon: str

    @property
    def script(self) -> str:
        """The script under app/pages/: in a folder named as the page, beside the helpers only
        that page uses, so the file keeps its name and the page its URL."""
        return f"{self.file.removesuffix('.py')}/{self.file}"


PAGES: tuple[PageSpec, ...] = (
    PageSpec("learn.py", "Learn: overconfidence", ":material/school:"),  # the default page
    PageSpec("data.py", "Data", ":material/dataset:"),
    PageSpec("train.py", "Train", ":material/model_training:"),
    PageSpec("monitor.py", "Monitor", ":material/monitoring:"),
    PageSpec("compare.py", "Compare", ":material/compare:"),
    PageSpec("playground.py", "Playground", ":material/chat:"),
)


def page_paths() -> list[str]:
    """Each page as `../pages/<page>/<page>.py`, the path st.switch_page, st.page_link and
    AppTest take: relative to the router's folder (app/server/), the main script's."""
    return [f"../pages/{page.script}" for page in PAGES]
