"""The studio's pages, declared once: the router (app/studio.py, which app/main.py runs) builds its navigation from
this list and tests/test_app_pages.py renders every page in it, so a page added here is
routed and tested with no other edit."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PageSpec:
    """A page: its file under app/views/, its title in the sidebar, its Material icon."""

    file: str
    title: str
    icon: str


PAGES: tuple[PageSpec, ...] = (
    PageSpec("learn.py", "Learn: overconfidence", ":material/school:"),  # the default page
    PageSpec("data.py", "Data", ":material/dataset:"),
    PageSpec("train.py", "Train", ":material/model_training:"),
    PageSpec("monitor.py", "Monitor", ":material/monitoring:"),
    PageSpec("compare.py", "Compare", ":material/compare:"),
    PageSpec("playground.py", "Playground", ":material/chat:"),
)


def page_paths() -> list[str]:
    """Each page as `views/<file>`, the path st.switch_page and AppTest take."""
    return [f"views/{page.file}" for page in PAGES]
