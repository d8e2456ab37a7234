"""Reading finished runs: their tables (view), the verdict and its advice (verdict,
advice), the HTML report (report), evaluations added later (added), selective answering
(selective) and a trained model on a typed prompt (playground)."""
