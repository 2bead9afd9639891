import pandas as pd
from ppo_lstm import TradingPolicy

bars = pd.read_csv("STOCKS_GOOGL.csv")
past, live = bars.iloc[:-3], bars.iloc[-3:]  # the history, and three bars that come in one by one

policy = TradingPolicy.load("runs/googl/best.pt")
decision = policy.warm_up(past, start="2017-09-01")  # a DataFrame, a file path or a MarketData
print("after", decision.time.astype("datetime64[D]"), "hold", decision.target_position, "lots next bar")
policy.save_state("googl.state.json")  # tomorrow: policy.load_state("googl.state.json")

for bar in live.itertuples():
    # here the broker trades to decision.target_position at this bar's open; had it filled
    # otherwise, policy.fill(price, lots) would book that instead
    decision = policy.update(bar.Date, bar.Open, bar.High, bar.Low, bar.Close, bar.Volume)
    chances = " ".join(f"{lots}:{p:.3f}" for lots, p in zip(decision.positions, decision.probabilities))
    day = decision.time.astype("datetime64[D]")  # a numpy.datetime64[ns]; pd.Timestamp(decision.time) for pandas'
    print("after", day, "holding", decision.position, "-> hold", decision.target_position,
          f"({chances}; value {decision.value:.3f}; equity {decision.equity:,.2f})")
