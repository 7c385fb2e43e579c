"""The commands of ``reasonrl`` beyond training, one module per topic; :mod:`reasonrl.cli` registers them."""
