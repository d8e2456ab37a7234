"""What the studio and the `calm` command do with runs: create and queue them (launch),
read them as tables (view), share them as an HTML report (report) or a package (export),
and try a trained run on a typed prompt (playground)."""
